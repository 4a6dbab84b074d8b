// Rendezvous over TCP: rank 0 listens on MASTER_ADDR:MASTER_PORT and hands a small blob (the NCCL
// unique id) to every other rank, which connects with retries until the timeout.
#pragma once
#include <chrono>
#include <string>

namespace ember::distributed {

// Rank 0 passes the blob and gets it back; the others get rank 0's blob. Throws
// execution_failed naming the address, port and rank on failure or timeout.
std::string tcp_broadcast_blob(int rank, int world_size, const std::string& addr, int port,
                               const std::string& blob, std::chrono::milliseconds timeout);

}  // namespace ember::distributed
