#!/usr/bin/env python3
"""The character-level GPT of examples/gpt written in PyTorch, to hold Ember's run against: the same
model, hyperparameters, data split, batches and seed policy.

Identical to examples/gpt/main.cpp:
  corpus      data::TextCorpus, read as examples/lstm/charlm_torch.py reads it (its helpers are used)
  split       the last max(n / 20, seq_len + 1) tokens are validation; non-overlapping windows of
              seq_len (input) and the same shifted by one (target)
  batches     data::DataLoader's epoch order, bit for bit (Philox-driven Fisher-Yates, drop_last);
              validation unshuffled, the first 20 batches
  model       Embedding(vocab, d) + a learned position table (pos_emb.weight [seq_len, d]) ->
              Dropout -> TransformerEncoder(TransformerEncoderLayer(d, heads, 4 d, dropout, gelu,
              batch_first, norm_first), layers, norm=LayerNorm(d)) with the causal mask ->
              Linear(d, vocab, bias=False); state-dict names equal Ember's (tok_emb, pos_emb, drop,
              blocks.layers.N.*, blocks.norm, head); GPT-2's initialization by name (Ember's
              matches it in distribution; the draws differ)
  training    AdamW(lr, betas (0.9, 0.99)), weight decay on parameters with >= 2 dims only, linear
              warm-up from lr / warmup then cosine decay to --min-lr (Ember's WarmupCosineLR is
              SequentialLR([LinearLR, CosineAnnealingLR])), gradient norm clipped at --clip,
              cross-entropy in float32, --amp bf16 autocast
  seed        torch.manual_seed(seed) before building the model; the sampler's generator seed + 7
  defaults    as the example's, including its short CPU run with a tiny model when there is no GPU
It prints the example's progress lines ("step N: train loss .. | val loss .. | .. tokens/s"), a
sample and, last, one JSON line with the final step's figures.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lstm"))
from charlm_torch import epoch_order, read_corpus, windows  # noqa: E402


class GPT(nn.Module):
    def __init__(self, vocab, context, d, layers, heads, dropout):
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab, d)
        self.pos_emb = nn.Embedding(context, d)  # Ember's LearnedPositionalEmbedding: "weight"
        self.drop = nn.Dropout(dropout)
        block = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab, bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() >= 2:
                    residual = name.endswith("out_proj.weight") or name.endswith("linear2.weight")
                    p.normal_(0.0, 0.02 / math.sqrt(2 * layers) if residual else 0.02)
                elif name.endswith("bias"):
                    p.zero_()
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, tokens):
        t = tokens.size(1)
        x = self.drop(self.tok_emb(tokens) + self.pos_emb.weight[:t])
        return self.head(self.blocks(x, mask=self.causal[:t, :t], is_causal=True))


@torch.no_grad()
def sample(model, vocabulary, device, n, temperature, gen):
    model.eval()
    out = bytearray(b"\n")
    ids = [vocabulary.index(ord("\n"))]
    for _ in range(n):
        window = torch.tensor([ids[-model.context:]], device=device)
        logits = model(window)[0, -1]
        probs = torch.softmax(logits.float() / temperature, 0).cpu()
        nxt = int(torch.multinomial(probs, 1, generator=gen))
        out.append(vocabulary[nxt])
        ids.append(nxt)
    model.train()
    return out.decode("utf-8", errors="replace")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", default="/usr/share/games/fortunes")
    p.add_argument("--device", default="auto")
    p.add_argument("--steps", type=int)
    p.add_argument("--batch-size", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--d-model", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="clip the gradient norm (0: off)")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--sample-chars", type=int)
    p.add_argument("--amp", default="none", choices=("none", "bf16"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the final JSON line to this file")
    a = p.parse_args()

    device = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                          "cpu" if a.device == "auto" else a.device)
    torch.manual_seed(a.seed)
    cpu_run = device.type == "cpu" and a.steps is None  # the example's short CPU run
    defaults = dict(steps=5000, batch_size=64, seq_len=256, d_model=384, layers=6, heads=6, warmup=100,
                    sample_chars=500)
    if cpu_run:
        defaults.update(steps=30, batch_size=16, seq_len=64, d_model=64, layers=2, heads=4, warmup=5,
                        sample_chars=200)
        a.eval_every = 15
        print("no GPU: a short CPU run with a tiny model (pass --steps for more)")
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)

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
    model = GPT(vocab, a.seq_len, a.d_model, a.layers, a.heads, a.dropout).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=a.weight_decay),
                             dict(params=no_decay, weight_decay=0.0)], lr=a.lr, betas=(0.9, 0.99))
    total = max(a.steps, a.warmup + 1)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, 1.0 / max(a.warmup, 1), 1.0, a.warmup),
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, total - a.warmup, a.min_lr)], milestones=[a.warmup])
    n_params = sum(p.numel() for p in model.parameters())
    print(f"char GPT on {a.corpus}: {n} characters, vocabulary {vocab}, {a.layers} layers x d {a.d_model} x "
          f"{a.heads} heads, context {a.seq_len}, {n_params / 1e6:.2f}M parameters, {device} "
          f"(PyTorch {torch.__version__})")

    def val_loss():
        model.eval()
        total_loss, k = 0.0, 0
        with torch.no_grad():  # the example evaluates without autocast
            for b in range(min(20, val_x.size(0) // a.batch_size)):
                x = val_x[b * a.batch_size:(b + 1) * a.batch_size].to(device)
                y = val_y[b * a.batch_size:(b + 1) * a.batch_size].to(device)
                total_loss += F.cross_entropy(model(x).reshape(-1, vocab).float(), y.reshape(-1)).item()
                k += 1
        model.train()
        return total_loss / max(k, 1)

    sampler = torch.Generator().manual_seed(a.seed + 7)
    per_epoch = train_x.size(0) // a.batch_size
    if per_epoch == 0:
        sys.exit(f"gpt_torch: the training split holds fewer than one batch of {a.batch_size} windows")
    done, tokens_seen, running, epoch, last = 0, 0, 0.0, 0, {}
    t0 = time.perf_counter()
    while done < a.steps:
        order = torch.tensor(epoch_order(train_x.size(0), a.seed, epoch))
        epoch += 1
        for b in range(per_epoch):
            if done >= a.steps:
                break
            idx = order[b * a.batch_size:(b + 1) * a.batch_size]
            x, y = train_x[idx].to(device, non_blocking=True), train_y[idx].to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == "bf16"):
                logits = model(x)
                loss = F.cross_entropy(logits.reshape(-1, vocab).float(), y.reshape(-1))
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            done += 1
            tokens_seen += x.numel()
            if done % 10 == 0 or done == a.steps:
                running = loss.item()
            if done % a.eval_every == 0 or done == a.steps:
                v = val_loss()
                secs = time.perf_counter() - t0
                print(f"step {done}: train loss {running:.4f} | val loss {v:.4f} | {tokens_seen / secs:.0f} tokens/s",
                      flush=True)
                last = dict(step=done, train_loss=running, val_loss=v, tokens_per_s=tokens_seen / secs)
    print(f"--- sample ---{sample(model, vocabulary, device, a.sample_chars, 0.8, sampler)}\n---", flush=True)
    result = dict(gpt="torch", torch=torch.__version__, device=str(device), corpus=a.corpus, files=len(files),
                  characters=n, vocab=vocab, batch=a.batch_size, seq_len=a.seq_len, d_model=a.d_model,
                  layers=a.layers, heads=a.heads, seed=a.seed, **last)
    print(json.dumps(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
