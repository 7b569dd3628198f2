"""transformers' assisted generation (a draft model, `assistant_model=`) and prompt lookup
(`prompt_lookup_num_tokens=`) beside its plain greedy decoding, on the models bench.rhai saved
(its `hf` folders), BF16 on the GPU, the same prompts and lengths as bench.rhai.

    python3 benches/speculative/torch_assisted.py out/target out/draft [new] [reps]
"""
import sys
import time

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

PROMPTS = ["pub fn ", "impl Tensor {\n    pub fn ", "/// Returns the ", "#[test]\nfn "]


def main():
    target_dir, draft_dir = sys.argv[1], sys.argv[2]
    new = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    tok = Tokenizer.from_file(f"{target_dir}/tokenizer.json")
    load = lambda d: AutoModelForCausalLM.from_pretrained(f"{d}/hf", dtype=torch.bfloat16).cuda().eval()
    target, draft = load(target_dir), load(draft_dir)
    ids = [torch.tensor([tok.encode(p).ids], device="cuda") for p in PROMPTS]
    modes = [("plain", {}), ("assistant", {"assistant_model": draft}),
             ("prompt lookup 8", {"prompt_lookup_num_tokens": 8, "max_matching_ngram_size": 3})]
    for name, extra in modes:
        run = lambda x: target.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                                        min_new_tokens=new, do_sample=False, pad_token_id=0,
                                        **extra)
        with torch.no_grad():
            for x in ids:
                run(x)
            torch.cuda.synchronize()
            start, tokens = time.perf_counter(), 0
            for _ in range(reps):
                for x in ids:
                    tokens += run(x).shape[1] - x.shape[1]
            torch.cuda.synchronize()
        s = time.perf_counter() - start
        print(f"transformers {name}: {tokens / s:.1f} tokens/s ({tokens} tokens in {s:.2f} s)")


if __name__ == "__main__":
    main()
