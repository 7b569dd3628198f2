"""The decode anchors for the 1.1B LLaMA shape (d 2048, 22 layers, 32/4 heads, ffn 5632, vocab
32000, max_position_embeddings 4096), BF16, greedy: transformers `generate` eager, and with
`cache_implementation="static"`, where generate compiles its decode step itself. Each
configuration is warmed up with the same lengths it is timed with, so the timed call meets no
recompile. Prints one JSON line per (mode, batch, context), as `lm_bench decode` does.

    python3 benches/torch_decode_bench.py --batch 1 16 --context 384 --mode eager static
"""
import argparse, json, time, torch

NEW = 256

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--context", type=int, nargs="+", default=[128 + NEW])
    ap.add_argument("--mode", nargs="+", default=["eager", "static"], choices=["eager", "static"])
    a = ap.parse_args()
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                      num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=4096)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    for mode in a.mode:
        for ctx in a.context:
            for bs in a.batch:
                inp = torch.randint(0, 32000, (1, ctx - NEW), device="cuda").repeat(bs, 1)
                kw = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
                if mode == "static":
                    kw["cache_implementation"] = "static"
                with torch.no_grad():
                    for _ in range(2):
                        m.generate(inp, **kw)
                    torch.cuda.synchronize(); t = time.time()
                    m.generate(inp, **kw)
                    torch.cuda.synchronize(); dt = time.time() - t
                print(json.dumps({"name": f"transformers {mode} greedy decode, 1.1B LLaMA shape, bf16, batch {bs}, context {ctx}",
                                  "tokens_per_s": round(bs * NEW / dt), "ms_per_step": round(dt / NEW * 1e3, 2)}), flush=True)

if __name__ == "__main__":
    main()
