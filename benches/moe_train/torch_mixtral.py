"""transformers' Mixtral training step beside `lm_bench train --experts 8 --top-k 2` at the same
shape: random tokens, BF16 autocast, fused AdamW (lr 3e-4), 5 warm-up steps then STEPS timed.
transformers 5 runs the experts as stacked weights, looping over the experts that got tokens.

    python3 benches/moe_train/torch_mixtral.py [--compile] D LAYERS HEADS KV FFN EXPERTS TOPK BATCH SEQ VOCAB STEPS
"""
import json
import sys
import time

import torch
from transformers import MixtralConfig, MixtralForCausalLM

args = [a for a in sys.argv[1:] if not a.startswith("--")]
compiled = "--compile" in sys.argv
d, layers, heads, kv, ffn, experts, topk, batch, seq, vocab, steps = map(int, args)
cfg = MixtralConfig(vocab_size=vocab, hidden_size=d, intermediate_size=ffn, num_hidden_layers=layers,
                    num_attention_heads=heads, num_key_value_heads=kv, num_local_experts=experts,
                    num_experts_per_tok=topk, max_position_embeddings=seq, sliding_window=None,
                    tie_word_embeddings=True, output_router_logits=False)
torch.manual_seed(0)
model = MixtralForCausalLM._from_config(cfg, attn_implementation="sdpa").cuda().train()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
x = torch.randint(0, vocab, (batch, seq), device="cuda")
y = torch.randint(0, vocab, (batch, seq), device="cuda")


def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


if compiled:
    step = torch.compile(step)
for _ in range(5):
    step()
torch.cuda.synchronize()
t = time.time()
for _ in range(steps):
    loss = step()
torch.cuda.synchronize()
dt = (time.time() - t) / steps
print(json.dumps({"name": f"transformers mixtral train, bf16 autocast{', torch.compile' if compiled else ''}",
                  "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
                  "step_ms": round(dt * 1e3, 2), "tokens_per_s": round(batch * seq / dt),
                  "loss": round(float(loss), 3),
                  "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)}))
