//! The `lm::` namespace: transformer language models, their training step and evaluation,
//! generation, checkpoints and llama.cpp GGUF files.

mod checkpoint;
mod generate;
mod gguf;
mod lora;
mod model;
mod quantize;
mod text;

pub use checkpoint::ScriptCheckpoint;
pub use model::{ids_of, ids_to_array, Lm};

use crate::error::{guard, RhaiResult};
use crate::help::{with_lm, with_tokenizer, with_tokenizer_and_lm, with_tokens, Api};
use crate::optim::Optim;
use rhai::{Array, Dynamic, Engine, Map, Module, INT};
use rusting_brain::io::onnx::export::ExportOptions;
use rusting_brain::nn::Module as _;
use rusting_brain::Tensor;

fn train_step(m: &mut Lm, batch: Dynamic, opt: Optim) -> RhaiResult<Tensor> {
    let batches = model::batches_of(&batch, "train_step")?;
    let model = m.lock();
    let mut o = opt.lock();
    guard(|| rusting_brain::models::transformer_lm::train_step(&model, &mut **o, &batches))
        .map(|(loss, _)| loss)
}

fn evaluate(m: &mut Lm, batches: Array) -> RhaiResult<Map> {
    let batches = batches
        .iter()
        .enumerate()
        .map(|(i, b)| model::batches_of(b, &format!("evaluate batch {i}")).map(|mut v| v.remove(0)))
        .collect::<RhaiResult<Vec<_>>>()?;
    let model = m.lock();
    let e = guard(|| {
        rusting_brain::models::transformer_lm::evaluate(&model, batches.into_iter().map(Ok))
    })?;
    let mut out = Map::new();
    out.insert("loss".into(), Dynamic::from_float(e.loss));
    out.insert("perplexity".into(), Dynamic::from_float(e.perplexity));
    out.insert("tokens".into(), Dynamic::from_int(e.tokens as INT));
    Ok(out)
}

crate::options! {
    struct ExportOnnxOptions {
        opset: INT = ExportOptions::default().opset,
        dynamic_batch: bool = ExportOptions::default().dynamic_batch,
    }
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<Lm>("LanguageModel");
    engine.register_type_with_name::<ScriptCheckpoint>("Checkpoint");
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("lm"));
        api.func("transformer", "lm::transformer(#{ vocab, d_model, layers, heads, kv_heads, ffn, rope_theta, max_seq_len, norm_eps, tied, bidirectional, init_std, seed, experts, experts_per_token, router_aux_loss_coef, router_z_loss_coef }) -> LanguageModel", "A LLaMA-family transformer (RMSNorm, rotary positions, grouped-query attention, SwiGLU) on the script's device. Parameter names follow Hugging Face LLaMA. experts makes every feed-forward a mixture of that many experts (Mixtral's layout, experts_per_token of them per token, 2 by default), whose loss adds router_aux_loss_coef (0.001) times the load-balancing loss and router_z_loss_coef (0) times the router z-loss.", with_tokenizer!("let model = lm::transformer(#{ vocab: tok.vocab_size, d_model: 32, layers: 2, heads: 4, max_seq_len: 64 });"), model::transformer);
        api.func("load", "lm::load(path) -> Checkpoint", "Reads a checkpoint written by model.save: ck.model(), ck.step(), ck.data_seed(), ck.extra(), ck.restore(opt).", with_lm!("model.save(\"out/lm.safetensors\", #{}); let ck = lm::load(\"out/lm.safetensors\"); let model = ck.model();"), |p: &str| checkpoint::load(p));
        api.func(
            "load_pretrained",
            "lm::load_pretrained(dir) -> LanguageModel",
            "Loads a Hugging Face LLaMA directory (config.json + model.safetensors, or shards listed in model.safetensors.index.json).",
            with_lm!("model.save_pretrained(\"tiny-llama\"); let model = lm::load_pretrained(\"tiny-llama\");"),
            |d: &str| checkpoint::load_pretrained(d),
        );
        api.func(
            "load_gguf",
            "lm::load_gguf(path) -> #{ model, tokenizer, eos_id, bos_id, add_bos, chat_template, name, tensor_types }",
            "Loads a llama.cpp GGUF file of the llama (also Mistral, and Mixtral with experts), qwen2, qwen3, gemma, gemma2, phi3, qwen2moe, qwen3moe or olmoe architecture (quantized weights are dequantized to F32; on a GPU, projections in Q8_0, Q4_1 or Q4_K stay in their blocks) with the tokenizer it carries (llama.cpp's byte-level BPE \"gpt2\" or SentencePiece \"llama\"); eos_id is the token to stop at, add_bos whether llama.cpp puts bos_id before a prompt.",
            "try { let g = lm::load_gguf(\"SmolLM2-135M-Instruct.Q4_1.gguf\"); let chat = \"<|im_start|>user\\nHi!<|im_end|>\\n<|im_start|>assistant\\n\"; print(g.model.generate(g.tokenizer, chat, #{ max_new_tokens: 20, stop: [g.eos_id] })); } catch (err) { print(`no GGUF file here: ${err}`); }",
            |p: &str| gguf::load_gguf(p),
        );
        api.method(
            "export_gguf",
            "model.export_gguf(path, #{ dtype, tokenizer, name }) -> #{ path, tensor_types, fallbacks, warnings }",
            "Writes the model as a llama.cpp GGUF file, as llama.cpp's converter writes its family (llama for LLaMA, Mistral without a window, and Mixtral; qwen2, qwen3, gemma, gemma2, phi3, qwen2moe, qwen3moe, olmoe), with an optional byte-level BPE tokenizer; what llama.cpp would run differently is refused by name. dtype: \"f16\" (default), \"bf16\", \"f32\", \"q8_0\", \"q4_0\" or \"q4_k\"; norms stay F32, and rows that are not whole blocks fall back as llama-quantize does (Q4_K to Q5_0, then F16).",
            with_tokenizer_and_lm!("let r = model.export_gguf(\"out/lm.gguf\", #{ dtype: \"q8_0\", tokenizer: tok }); print(r.tensor_types);"),
            gguf::export_gguf,
        );
        api.method(
            "forward",
            "model.forward(ids) -> Tensor",
            "Logits [batch, seq, vocab] for integer ids [batch, seq].",
            with_lm!("let logits = model.forward(x);"),
            |m: &mut Lm, ids: Tensor| guard(|| m.lock().forward(&ids)),
        );
        api.method("loss", "model.loss(x, y) -> Tensor", "Mean next-token cross-entropy of ids x [batch, seq] against targets y (FP32; BF16 mixed precision on CUDA).", with_lm!("let y = randint(0, 64, [2, 8]); let loss = model.loss(x, y); loss.backward();"), |m: &mut Lm, x: Tensor, y: Tensor| guard(|| m.lock().loss(&x, &y)));
        api.method("train_step", "model.train_step([x, y] | [[x, y], ...], opt) -> Tensor", "Zeroes the gradients, runs forward and backward over the batch (or accumulates over several micro-batches), steps the optimizer; returns the mean loss (a 0-d tensor: .item() reads it).", with_tokens!("let model = lm::transformer(#{ vocab: tok.vocab_size, d_model: 16, layers: 1, heads: 2 }); let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 }); let step = 0; let loss = model.train_step(train.batch(step, 2, 8, #{}), opt);"), train_step);
        api.method(
            "evaluate",
            "model.evaluate([[x, y], ...]) -> #{ loss, perplexity, tokens }",
            "Mean loss and perplexity over batches, without gradients.",
            with_tokens!("let model = lm::transformer(#{ vocab: tok.vocab_size, d_model: 16, layers: 1, heads: 2 }); let ev = model.evaluate(val.eval_batches(2, 8, 8));"),
            evaluate,
        );
        api.method(
            "parameters",
            "model.parameters() -> array",
            "The trainable tensors, for an optimizer (only the LoRA adapters after lm::lora).",
            with_lm!("let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 });"),
            |m: &mut Lm| model::parameters(m),
        );
        api.method(
            "num_parameters",
            "model.num_parameters() -> int",
            "How many numbers the model trains (only the adapters' after lm::lora).",
            with_lm!("print(model.num_parameters())"),
            |m: &mut Lm| {
                let model = m.lock();
                model
                    .trainable_parameters()
                    .iter()
                    .map(|t| t.numel())
                    .sum::<usize>() as INT
            },
        );
        api.method(
            "config",
            "model.config() -> map",
            "The model's sizes, as lm::transformer takes them.",
            with_lm!("print(model.config().d_model)"),
            |m: &mut Lm| model::config_map(&m.lock().config),
        );
        api.method(
            "set_precision",
            "model.set_precision(\"auto\" | \"f32\" | \"bf16\" | \"f16\")",
            "Matrix-product precision: auto is BF16 mixed precision on CUDA and F32 on the CPU.",
            with_lm!("model.set_precision(\"f32\");"),
            |m: &mut Lm, p: &str| -> RhaiResult<()> {
                let p = model::parse_precision(p)?;
                m.lock().set_precision(p);
                Ok(())
            },
        );
        api.method(
            "to",
            "model.to(device)",
            "Moves the parameters to \"cpu\" or \"cuda\" in place (make the optimizer after).",
            with_lm!("model.to(\"cpu\");"),
            |m: &mut Lm, device: &str| -> RhaiResult<()> {
                let d = crate::convert::device(device)?;
                guard(|| m.lock().to_device(d))
            },
        );
        api.method("generate", "model.generate(ids | [ids, ...], #{ max_new_tokens, temperature, top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty, seed, stop, cuda_graph, max_time, num_beams, length_penalty, early_stopping, return_beams, draft, draft_tokens, prompt_lookup, max_ngram, logprobs }) -> ids | [ids, ...]", "New token ids after a prompt (or a batch of prompts), with a KV cache. temperature 0 is greedy; stop ids end a sequence; max_time (seconds) ends generation after the token that passes it; on CUDA the step replays as a CUDA graph unless cuda_graph is false. num_beams > 1 runs beam search as transformers scores it (length_penalty, early_stopping true | false | \"never\"; return_beams gives every hypothesis as #{ ids, score }). draft: a smaller model with the same vocabulary (draft_tokens at a time), or prompt_lookup: n (copies of what followed the last max_ngram tokens earlier in the text), decode speculatively: the same greedy tokens, the same sampling distribution, fewer passes of the model. logprobs: true gives each row as #{ ids, log_probs }: every new token's log-probability under the model (before penalties, temperature and filters).", with_tokenizer_and_lm!("let ids = model.generate(tok.encode(\"the cat\"), #{ max_new_tokens: 5, temperature: 0.8, top_p: 0.95 }); let scored = model.generate(tok.encode(\"the cat\"), #{ max_new_tokens: 3, logprobs: true }); print(scored.log_probs); let best = model.generate(tok.encode(\"the cat\"), #{ max_new_tokens: 5, num_beams: 3 }); let fast = model.generate(tok.encode(\"the cat sat on the\"), #{ max_new_tokens: 5, temperature: 0.0, prompt_lookup: 4 });"), generate::generate_ids);
        api.method("stream", "model.stream(ids, opts, |id| ...) -> ids", "Like generate for one prompt, calling the closure with each new id as it comes; returning false stops. Speculative decoding streams too; beam search does not.", with_lm!("let ids = [1, 2, 3]; model.stream(ids, #{ max_new_tokens: 5 }, |id| { print(id); true });"), generate::stream_ids);
        api.method("generate", "model.generate(tok, text | [text, ...], opts) -> text | [text, ...]", "Generated text after a text prompt (or a batch), stopping at the tokenizer's end-of-text token unless opts.stop gives ids. opts.stop may also hold strings: the text ends before the first of them. The other options are those of generate with ids; with logprobs: true each row is #{ text, ids, log_probs }.", with_tokenizer_and_lm!("print(model.generate(tok, \"the cat\", #{ max_new_tokens: 5, temperature: 0.8, top_k: 40, stop: [\".\"] })); print(model.generate(tok, \"the cat\", #{ max_new_tokens: 3, logprobs: true }).log_probs);"), text::generate_text);
        api.method("stream", "model.stream(tok, text, opts, |piece| ...) -> text", "Generates after a text prompt, calling the closure with each new piece of text as it comes (whole characters only); returning false stops. No part of a stop string is ever handed to the closure.", with_tokenizer_and_lm!("let pieces = []; let text = model.stream(tok, \"the \", #{ max_new_tokens: 5 }, |piece| { pieces.push(piece); true });"), text::stream_text);
        api.method("chat", "model.chat(tok, template, [#{ role, content }, ...], opts) -> text", "The assistant's reply to a conversation: the chat template rendered with its generation prompt, encoded as it is written (the template writes any BOS), generated until the template's end-of-turn token (<|im_end|>, <|eot_id|>, <end_of_turn>, <|end|>, ...) or the tokenizer's end of text, unless opts.stop gives ids. opts are generate's; push the reply as #{ role: \"assistant\", content } to go on.", with_tokenizer_and_lm!("let t = text::chat_template(\"{% for m in messages %}{{ m.role }}: {{ m.content }}\\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}\"); let reply = model.chat(tok, t, [#{ role: \"user\", content: \"the cat\" }], #{ max_new_tokens: 5, stop: [\"\\n\"] });"), text::chat);
        api.method("chat", "model.chat(tok, template, messages, opts, |piece| ...) -> text", "model.chat, streaming the reply: the closure gets each new piece of text; its false stops.", with_tokenizer_and_lm!("let t = text::chat_template(\"{% for m in messages %}{{ m.content }}{% endfor %}\"); model.chat(tok, t, [#{ role: \"user\", content: \"the cat\" }], #{ max_new_tokens: 5 }, |piece| { print(piece); true });"), text::chat_stream);
        api.method(
            "router_aux_loss",
            "model.router_aux_loss(ids) -> Tensor",
            "A mixture of experts' load-balancing loss over every layer's routing of ids [batch, seq] (Switch Transformers', as transformers' aux_loss): at its least, experts_per_token, when the routers spread tokens evenly.",
            "let moe = lm::transformer(#{ vocab: 32, d_model: 16, layers: 2, heads: 2, experts: 4 }); print(moe.router_aux_loss(randint(0, 32, [2, 8])));",
            |m: &mut Lm, ids: Tensor| guard(|| m.lock().router_aux_loss(&ids)),
        );
        api.method(
            "router_z_loss",
            "model.router_z_loss(ids) -> Tensor",
            "A mixture of experts' router z-loss (ST-MoE): the mean over every layer's tokens of logsumexp(router logits)^2, which keeps the routers' logits small.",
            "let moe = lm::transformer(#{ vocab: 32, d_model: 16, layers: 2, heads: 2, experts: 4, router_z_loss_coef: 0.001 }); print(moe.router_z_loss(randint(0, 32, [2, 8])));",
            |m: &mut Lm, ids: Tensor| guard(|| m.lock().router_z_loss(&ids)),
        );
        api.method(
            "log_probabilities",
            "model.log_probabilities(ids) -> array",
            "log p(token | tokens before it) for every token after the first.",
            with_tokenizer_and_lm!(
                "let lp = model.log_probabilities(tok.encode(\"the cat sat\"));"
            ),
            generate::log_probabilities,
        );
        api.method("save", "model.save(path, #{ optimizer, step, data_seed, extra }) -> path", "Writes a checkpoint: weights (Hugging Face names), optimizer state and schedule, step, data position and extra script values, in one safetensors file with a JSON header. Under `brain launch` every rank calls it: rank 0 writes (after every rank's share of a sharded optimizer state is gathered), and each returns once the file is there, or with rank 0's error.", with_lm!("let opt = optim::adamw(model.parameters(), #{}); let step = 10; model.save(\"out/lm.safetensors\", #{ optimizer: opt, step: step, data_seed: 1 });"), checkpoint::save);
        api.method(
            "save_pretrained",
            "model.save_pretrained(dir) -> dir",
            "Writes config.json, generation_config.json and model.safetensors as Hugging Face transformers loads them (its save_pretrained; `export` is a reserved word in Rhai).",
            with_lm!("model.save_pretrained(\"out/hf\");"),
            |m: &mut Lm, dir: &str| checkpoint::save_pretrained(m, dir, Map::new()),
        );
        api.method(
            "save_pretrained",
            "model.save_pretrained(dir, #{ tokenizer, max_shard_size, bos_id, eos_id, chat_template }) -> dir",
            "Like save_pretrained(dir), with tokenizer.json and tokenizer_config.json written beside the weights (the end-of-text token is the eos id unless eos_id is given; chat_template, e.g. a GGUF's, goes into tokenizer_config.json for apply_chat_template) and the weights split into model-00001-of-0000N.safetensors shards with model.safetensors.index.json above max_shard_size (bytes or \"5GB\", \"200MiB\"; default 5GB).",
            with_tokenizer_and_lm!("model.save_pretrained(\"out/hf\", #{ tokenizer: tok, max_shard_size: \"10KB\" }); let back = lm::load_pretrained(\"out/hf\");"),
            checkpoint::save_pretrained,
        );
        api.method(
            "quantize",
            "model.quantize(\"nf4\" | \"q8_0\" | \"q4_k\" | \"q4_1\")",
            "Keeps every projection (and an untied head) quantized in place: NF4 with double-quantized scales as bitsandbytes stores a QLoRA base (rows of whole 64-value blocks; about 4.1 bits a weight), or llama.cpp's Q8_0 (32), Q4_K (256) or Q4_1 (32) blocks. Quantized weights are frozen and stop being parameters; products dequantize them on the fly (forward and backward), so lm::lora afterwards is QLoRA. Refused, changing nothing, when a width does not hold whole blocks.",
            "let model = lm::transformer(#{ vocab: 64, d_model: 64, layers: 1, heads: 2, ffn: 128, max_seq_len: 32, tied: false }); model.quantize(\"nf4\"); lm::lora(model, #{ rank: 4, alpha: 8 }); let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 });",
            quantize::quantize,
        );
        api.method(
            "quantized_layers",
            "model.quantized_layers() -> map",
            "#{ layer name: format } of the quantized layers (\"nf4\", \"q8_0\", ...; empty when none is).",
            "let model = lm::transformer(#{ vocab: 64, d_model: 64, layers: 1, heads: 2, ffn: 128, max_seq_len: 32 }); model.quantize(\"q8_0\"); print(model.quantized_layers()[\"model.layers.0.self_attn.q_proj\"]);",
            quantize::quantized_layers,
        );
        api.func(
            "lora",
            "lm::lora(model, #{ rank, alpha, dropout, targets, rslora, seed }) -> LanguageModel",
            "Adds LoRA adapters (PEFT's init: A kaiming-uniform, B zero) to the named projections of every layer (targets from q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj; default q_proj and v_proj; rank 8, alpha 8) and freezes every other weight, so model.parameters() is then the adapters. Changes the model in place and returns it.",
            with_lm!("lm::lora(model, #{ rank: 4, alpha: 8, targets: [\"q_proj\", \"v_proj\"] }); let opt = optim::adamw(model.parameters(), #{ lr: 1e-3 }); print(model.num_parameters());"),
            lora::lora,
        );
        api.method(
            "merge_lora",
            "model.merge_lora()",
            "Folds the LoRA adapters into the weights (W += B A alpha/rank) and removes them; every weight trains again.",
            with_lm!("lm::lora(model, #{ rank: 2 }); model.merge_lora();"),
            lora::merge_lora,
        );
        api.method(
            "lora_config",
            "model.lora_config() -> #{ rank, alpha, dropout, targets, rslora } | ()",
            "The adapters' settings, or () when the model has none.",
            with_lm!("lm::lora(model, #{ rank: 2 }); print(model.lora_config().rank);"),
            lora::lora_config,
        );
        api.method(
            "save_adapter",
            "model.save_adapter(dir) -> dir",
            "Writes the LoRA adapters as PEFT does (adapter_config.json, adapter_model.safetensors), for PeftModel.from_pretrained or lm::load_adapter.",
            with_lm!("lm::lora(model, #{ rank: 2 }); model.save_adapter(\"out/adapter\");"),
            |m: &mut Lm, dir: &str| lora::save_adapter(m, dir, Map::new()),
        );
        api.method(
            "save_adapter",
            "model.save_adapter(dir, #{ base_model }) -> dir",
            "Like save_adapter(dir), recording base_model (a path or hub name) as base_model_name_or_path.",
            with_lm!("model.save_pretrained(\"out/base\"); lm::lora(model, #{ rank: 2 }); model.save_adapter(\"out/adapter\", #{ base_model: \"out/base\" });"),
            lora::save_adapter,
        );
        api.func(
            "load_adapter",
            "lm::load_adapter(model, dir) -> LanguageModel",
            "Adds the LoRA adapters of a PEFT adapter directory to a model without adapters (in place; returns it). Unsupported PEFT options, unknown targets and mis-shaped tensors are errors that name them.",
            with_lm!("lm::lora(model, #{ rank: 2 }); model.save_adapter(\"out/adapter\"); model.merge_lora(); let base = lm::transformer(#{ vocab: 64, d_model: 16, layers: 1, heads: 2, max_seq_len: 32 }); lm::load_adapter(base, \"out/adapter\");"),
            lora::load_adapter,
        );
        api.method(
            "export_onnx",
            "model.export_onnx(path, #{ opset, dynamic_batch }) -> path",
            "Writes the model as ONNX: input_ids [batch, sequence] (int64) in, logits [batch, sequence, vocab] (float) out, for any window up to max_seq_len (no KV cache: a runtime feeds the whole window). opset 17 by default (13 to 21); the batch is named unless dynamic_batch is false. Weights above 1 GiB go to a .data file beside it.",
            with_lm!("model.export_onnx(\"out/lm.onnx\", #{});"),
            |m: &mut Lm, path: &str, opts: Map| -> RhaiResult<String> {
                let o = ExportOnnxOptions::parse("export_onnx", opts)?;
                let export = ExportOptions {
                    opset: o.opset,
                    dynamic_batch: o.dynamic_batch,
                };
                crate::onnx::prepare(path)?;
                guard(|| m.lock().export_onnx(path, &export))?;
                Ok(path.to_string())
            },
        );
        api.method(
            "model",
            "ck.model() -> LanguageModel",
            "The checkpoint's model on the script's device.",
            with_lm!("let path = model.save(\"out/lm.safetensors\", #{}); let model = lm::load(path).model();"),
            checkpoint::model,
        );
        api.method("restore", "ck.restore(opt)", "Loads the saved optimizer state, schedule and clipping into an optimizer made over ck.model()'s parameters.", with_lm!("let opt = optim::adamw(model.parameters(), #{}); model.save(\"out/lm.safetensors\", #{ optimizer: opt }); let ck = lm::load(\"out/lm.safetensors\"); let opt2 = optim::adamw(ck.model().parameters(), #{}); ck.restore(opt2);"), checkpoint::restore);
        api.method(
            "step",
            "ck.step() -> int",
            "The training step the checkpoint was saved at.",
            with_lm!("model.save(\"out/lm.safetensors\", #{ step: 100 }); let ck = lm::load(\"out/lm.safetensors\"); let start = ck.step();"),
            checkpoint::step,
        );
        api.method(
            "data_seed",
            "ck.data_seed() -> int",
            "The data stream's seed saved with the checkpoint.",
            with_lm!("model.save(\"out/lm.safetensors\", #{ data_seed: 7 }); let ck = lm::load(\"out/lm.safetensors\"); let seed = ck.data_seed();"),
            checkpoint::data_seed,
        );
        api.method(
            "extra",
            "ck.extra() -> value",
            "The extra values saved with the checkpoint.",
            with_lm!("model.save(\"out/lm.safetensors\", #{ extra: #{ losses: [3.2, 2.9] } }); let ck = lm::load(\"out/lm.safetensors\"); let history = ck.extra().losses;"),
            checkpoint::extra,
        );
        api.method(
            "config",
            "ck.config() -> map",
            "The saved model's sizes.",
            with_lm!("model.save(\"out/lm.safetensors\", #{}); let ck = lm::load(\"out/lm.safetensors\"); print(ck.config())"),
            checkpoint::config,
        );
    }
    engine.register_static_module("lm", module.into());
}
