#!/usr/bin/env python3
"""The char LM of examples/lstm (--task charlm) written in PyTorch, for the acceptance comparison of
issue 7 (scripts/acceptance.sh): the same model, hyperparameters, data split, batches and seed policy,
so that its validation loss at a fixed step can be held against Ember's.

Identical to examples/lstm/main.cpp:
  corpus      data::TextCorpus: a file, or every regular file of a folder in name order (hidden files
              and *.dat skipped, a file reached by several names read once), fortune's "%" lines
              made empty, a newline appended to a file that lacks one; byte-level vocabulary = the
              sorted set of bytes present
  split       the last max(n / 20, seq_len + 1) tokens are validation; non-overlapping windows of
              seq_len (input) and the same shifted by one (target)
  batches     data::DataLoader's epoch order, bit for bit: a Fisher-Yates shuffle driven by
              Philox4x32-10 keyed by the seed (philox_bits below mirrors nn/data.cpp), drop_last;
              validation unshuffled, the first 20 batches
  model       Embedding(vocab, embed) -> LSTM(embed, hidden, layers, batch_first, dropout) ->
              Linear(hidden, vocab), PyTorch's default initialisation (Ember's matches it in
              distribution; the draws differ)
  training    Adam(lr), cross-entropy in float32, gradient norm clipped at --clip, --amp bf16 autocast
  seed        torch.manual_seed(seed) before building the model (Ember: manual_seed(seed)); the
              sampler's generator is seeded with seed + 7
  defaults    as the example's, including its short CPU run when there is no GPU and no --steps
It prints the example's progress lines ("step N: train loss .. | val loss .. | .. tokens/s") and, last,
one JSON line with the final step's figures.
"""
import argparse
import gzip
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK32 = 0xFFFFFFFF
SHUFFLE_STREAM = 0x5348554646  # "SHUFF", nn/data.cpp's kShuffleStream


def philox4x32_10(counter, key0, key1):
    x, y, z, w = counter
    for r in range(10):
        if r:
            key0 = (key0 + 0x9E3779B9) & MASK32
            key1 = (key1 + 0xBB67AE85) & MASK32
        prod0 = 0xD2511F53 * x
        prod1 = 0xCD9E8D57 * z
        x, y, z, w = ((prod1 >> 32) ^ y ^ key0) & MASK32, prod1 & MASK32, ((prod0 >> 32) ^ w ^ key1) & MASK32, \
            prod0 & MASK32
    return x, y, z, w


def philox_bits(seed, stream, counter):
    """nn/data.cpp's philox_bits: the first two words of philox::draw4(seed, stream, 4 * counter)."""
    cz, cw = 0, 0
    n_lo, n_hi = stream & MASK32, (stream >> 32) & MASK32  # advance_subsequences(stream)
    cz = (cz + n_lo) & MASK32
    if cz < n_lo:
        n_hi = (n_hi + 1) & MASK32
    cw = (cw + n_hi) & MASK32
    n_lo, n_hi = counter & MASK32, (counter >> 32) & MASK32  # advance_blocks(counter), cuRAND's carry
    cx = n_lo
    if cx < n_lo:
        n_hi = (n_hi + 1) & MASK32
    cy = n_hi
    if n_hi > cy:
        cz = (cz + 1) & MASK32
        if cz == 0:
            cw = (cw + 1) & MASK32
    r = philox4x32_10((cx, cy, cz, cw), seed & MASK32, (seed >> 32) & MASK32)
    return (r[0] << 32) | r[1]


def epoch_order(size, seed, epoch):
    """data::DataLoader::epoch_order with shuffle on."""
    order = list(range(size))
    key = philox_bits(seed, SHUFFLE_STREAM, epoch)
    for i in range(size, 1, -1):
        j = philox_bits(key, i - 1, 0) % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def read_corpus(path):
    """data::TextCorpus (nn/datasets.cpp) with its default options: returns (text bytes, files)."""
    if os.path.isdir(path):
        entries = []
        for name in os.listdir(path):
            full = os.path.join(path, name)
            if not name or name.startswith(".") or name.endswith(".dat") or not os.path.isfile(full):
                continue
            entries.append(full)
        files, seen = [], set()
        for p in sorted(entries, key=os.fsencode):
            real = os.path.realpath(p)
            if real not in seen:
                seen.add(real)
                files.append(p)
    elif os.path.isfile(path):
        files = [path]
    else:
        sys.exit(f"charlm_torch: '{path}' is neither a file nor a folder; give a text file or a folder of them")
    text = bytearray()
    for f in files:
        with open(f, "rb") as fh:
            data = fh.read()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        nul = data.find(b"\0")
        if nul >= 0:
            sys.exit(f"charlm_torch: {f}: a NUL byte at offset {nul}; this is binary data, not text")
        lines = data.split(b"\n")  # a "%" line (fortune's separator) becomes an empty line
        data = b"\n".join(b"" if line == b"%" else line for line in lines)
        if data and not data.endswith(b"\n"):
            data += b"\n"
        text += data
    if not text:
        sys.exit(f"charlm_torch: '{path}' holds no text")
    return bytes(text), files


class CharLM(nn.Module):
    def __init__(self, vocab, embed_dim, hidden, layers, dropout):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden, num_layers=layers, batch_first=True, dropout=dropout)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, tokens, state=None):
        out, state = self.lstm(self.embed(tokens), state)
        return self.head(out), state


def windows(tokens, seq_len):
    """data::SequenceDataset: non-overlapping (input, target) windows, the last partial one dropped."""
    n = max(0, (tokens.numel() - 1) // seq_len)
    inputs = tokens[: n * seq_len].view(n, seq_len)
    targets = tokens[1: n * seq_len + 1].view(n, seq_len)
    return inputs, targets


@torch.no_grad()
def sample(model, vocabulary, device, n, temperature, gen):
    model.eval()
    out = bytearray(b"\n")
    token = torch.tensor([[vocabulary.index(ord("\n"))]], device=device)
    state = None
    for _ in range(n):
        logits, state = model(token, state)
        probs = torch.softmax(logits.reshape(-1).float() / temperature, 0).cpu()
        nxt = int(torch.multinomial(probs, 1, generator=gen))
        out.append(vocabulary[nxt])
        token = torch.tensor([[nxt]], device=device)
    model.train()
    return out.decode("utf-8", errors="replace")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="/usr/share/games/fortunes")
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embed", type=int, default=256)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--clip", type=float, default=1.0, help="clip the gradient norm (0: off)")
    p.add_argument("--sample-every", type=int, default=250)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--amp", default="none", choices=("none", "bf16"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the final JSON line to this file")
    a = p.parse_args()

    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          "cpu" if a.device == "auto" else a.device)
    torch.manual_seed(a.seed)
    steps = a.steps if a.steps is not None else 2000
    if device.type == "cpu" and a.steps is None:  # the example's short CPU run
        steps, a.hidden, a.seq_len = 30, min(a.hidden, 128), min(a.seq_len, 64)
        a.sample_every = a.eval_every = 15
        print("no GPU: a short CPU run (pass --steps for more)")
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for cuDNN's RNNs; Ember's too

    text, files = read_corpus(a.corpus)
    vocabulary = sorted(set(text))
    id_of = torch.full((256,), -1, dtype=torch.int64)
    id_of[torch.tensor(vocabulary)] = torch.arange(len(vocabulary))
    tokens = id_of[torch.frombuffer(bytearray(text), dtype=torch.uint8).long()]
    n = tokens.numel()
    n_val = max(n // 20, a.seq_len + 1)
    train_x, train_y = windows(tokens[: n - n_val], a.seq_len)
    val_x, val_y = windows(tokens[n - n_val:], a.seq_len)
    vocab = len(vocabulary)
    model = CharLM(vocab, a.embed, a.hidden, a.layers, a.dropout).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    print(f"char LM on {a.corpus}: {n} characters, vocabulary {vocab}, LSTM {a.layers} x {a.hidden}, {device} "
          f"(PyTorch {torch.__version__})")

    def val_loss():
        model.eval()
        total, k = 0.0, 0
        with torch.no_grad():  # the example evaluates without autocast
            for b in range(min(20, val_x.size(0) // a.batch_size)):
                x = val_x[b * a.batch_size:(b + 1) * a.batch_size].to(device)
                y = val_y[b * a.batch_size:(b + 1) * a.batch_size].to(device)
                total += F.cross_entropy(model(x)[0].reshape(-1, vocab).float(), y.reshape(-1)).item()
                k += 1
        model.train()
        return total / max(k, 1)

    sampler = torch.Generator().manual_seed(a.seed + 7)
    per_epoch = train_x.size(0) // a.batch_size
    if per_epoch == 0:
        sys.exit(f"charlm_torch: the training split holds fewer than one batch of {a.batch_size} windows")
    done, tokens_seen, running, epoch, last = 0, 0, 0.0, 0, {}
    t0 = time.perf_counter()
    while done < steps:
        order = torch.tensor(epoch_order(train_x.size(0), a.seed, epoch))
        epoch += 1
        for b in range(per_epoch):
            if done >= steps:
                break
            idx = order[b * a.batch_size:(b + 1) * a.batch_size]
            x, y = train_x[idx].to(device, non_blocking=True), train_y[idx].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == "bf16"):
                logits = model(x)[0]
                loss = F.cross_entropy(logits.reshape(-1, vocab).float(), y.reshape(-1))
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            opt.zero_grad(set_to_none=False)
            done += 1
            tokens_seen += x.numel()
            if done % 10 == 0 or done == steps:
                running = loss.item()
            if done % a.eval_every == 0 or done == steps:
                v = val_loss()
                secs = time.perf_counter() - t0
                print(f"step {done}: train loss {running:.4f} | val loss {v:.4f} | {tokens_seen / secs:.0f} tokens/s",
                      flush=True)
                last = dict(step=done, train_loss=running, val_loss=v, tokens_per_s=tokens_seen / secs)
            if done % a.sample_every == 0 or done == steps:
                print(f"--- sample at step {done} ---{sample(model, vocabulary, device, 200, 0.8, sampler)}\n---",
                      flush=True)
    result = dict(charlm="torch", torch=torch.__version__, device=str(device), corpus=a.corpus, files=len(files),
                  characters=n, vocab=vocab, batch=a.batch_size, seq_len=a.seq_len, seed=a.seed, **last)
    print(json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
