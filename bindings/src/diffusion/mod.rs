//! `diffusion::`: diffusion models from a script: Stable Diffusion pipelines from diffusers
//! folders (`diffusion::load`, `pipe.generate`) and the samplers (diffusers' schedulers). A
//! `Scheduler` or `Pipeline` value is a handle: copies share one walk or one set of weights.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::{self, Api};
use crate::nn::Model;
use rhai::{Array, Dynamic, Engine, Map, Module, INT};
use rusting_brain::models::diffusion::scheduler::{self as sched, Scheduler};
use rusting_brain::models::diffusion::{AddedConditions, StableDiffusion, UNet, UNetConfig};
use rusting_brain::{Generator, Tensor};
use std::sync::{Arc, Mutex};

/// A diffusion pipeline (SD 1.x / 2.x, SDXL, SD3, FLUX folders).
mod pipeline;

pub use pipeline::PipelineHandle;
use pipeline::{add_textual_inversion, generate};

/// A scheduler and the generator its stochastic steps draw from.
#[derive(Clone)]
pub struct SchedulerHandle(Arc<Mutex<(Box<dyn Scheduler>, Generator)>>);

impl SchedulerHandle {
    fn with<R>(&self, f: impl FnOnce(&mut dyn Scheduler, &mut Generator) -> R) -> R {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (s, gen) = &mut *g;
        f(s.as_mut(), gen)
    }
}

crate::options! {
    struct SchedulerOptions {
        class: String,
        seed: INT = 0,
        eta: f64 = 0.0,
        steps: usize = 0,
    }
}

/// `diffusion::scheduler(config, opts)`: config is a folder, a scheduler_config.json path or
/// a map of its fields.
fn scheduler(config: Dynamic, opts: Map) -> RhaiResult<SchedulerHandle> {
    let o = SchedulerOptions::parse("diffusion::scheduler", opts)?;
    let class = o.class.as_deref();
    let s = if let Some(map) = config.clone().try_cast::<Map>() {
        let json = rhai::serde::from_dynamic::<serde_json::Value>(&Dynamic::from_map(map))
            .map_err(|e| runtime_error(format!("diffusion::scheduler: {e}")))?;
        guard(|| sched::from_config(&json.to_string(), class))?
    } else if let Some(path) = config.clone().try_cast::<String>() {
        let p = std::path::Path::new(&path);
        if p.is_file() {
            let text = std::fs::read_to_string(p)
                .map_err(|e| runtime_error(format!("diffusion::scheduler: {path}: {e}")))?;
            guard(|| sched::from_config(&text, class))?
        } else {
            guard(|| sched::from_folder(p, class))?
        }
    } else {
        return Err(runtime_error(format!(
            "diffusion::scheduler: give a folder, a scheduler_config.json path or a map of its fields, got {}",
            config.type_name()
        )));
    };
    let handle = SchedulerHandle(Arc::new(Mutex::new((s, Generator::new(o.seed as u64)))));
    let (eta, steps) = (o.eta, o.steps);
    handle.with(|s, _| {
        guard(|| {
            s.set_eta(eta)?;
            if steps > 0 {
                s.set_timesteps(steps)?;
            }
            Ok(())
        })
    })?;
    Ok(handle)
}

/// A getter's name, signature, help text and body.
type Getter = (
    &'static str,
    &'static str,
    &'static str,
    fn(&mut SchedulerHandle) -> Dynamic,
);

crate::options! {
    struct UNetOptions {
        seed: INT = 0,
    }
}

/// `diffusion::unet(config, opts)`: from a diffusers folder, or a fresh one from a map of
/// config.json's fields.
fn unet(config: Dynamic, opts: Map) -> RhaiResult<Model> {
    let o = UNetOptions::parse("diffusion::unet", opts)?;
    if let Some(dir) = config.clone().try_cast::<String>() {
        return guard(|| UNet::from_folder(std::path::Path::new(&dir)))
            .map(|u| Model::new(Box::new(u)));
    }
    let map = config.clone().try_cast::<Map>().ok_or_else(|| {
        runtime_error(format!(
            "diffusion::unet: give a diffusers folder or a map of config.json's fields, got {}",
            config.type_name()
        ))
    })?;
    let json = rhai::serde::from_dynamic::<serde_json::Value>(&Dynamic::from_map(map))
        .map_err(|e| runtime_error(format!("diffusion::unet: {e}")))?;
    let mut gen = Generator::new(o.seed as u64);
    let mut u = guard(|| UNet::new(UNetConfig::from_json(&json)?, &mut gen))?;
    u.sample_size = json
        .get("sample_size")
        .and_then(serde_json::Value::as_u64)
        .map(|s| s as usize);
    Ok(Model::new(Box::new(u)))
}

/// Timesteps as a tensor: a number (one for all), a list, or a tensor.
fn timesteps(t: &Dynamic, what: &str) -> RhaiResult<Tensor> {
    if let Some(t) = t.clone().try_cast::<Tensor>() {
        return Ok(t);
    }
    if let Ok(x) = crate::convert::number(t, what) {
        return guard(|| Tensor::from_f64s(&[x], &[1], rusting_brain::DType::F32));
    }
    if let Some(a) = t.clone().try_cast::<Array>() {
        let v = a
            .iter()
            .map(|x| crate::convert::number(x, what))
            .collect::<RhaiResult<Vec<f64>>>()?;
        return guard(|| Tensor::from_f64s(&v, &[v.len()], rusting_brain::DType::F32));
    }
    Err(runtime_error(format!(
        "{what}: timesteps are a number, a list or a tensor, got {}",
        t.type_name()
    )))
}

/// Training timesteps (whole numbers in [0, train)) from a tensor or a list, one per row.
fn training_steps(t: &Dynamic, what: &str) -> RhaiResult<Vec<usize>> {
    let t = timesteps(t, what)?;
    let values = guard(|| t.to_vec_f64())?;
    values
        .into_iter()
        .map(|x| {
            (x >= 0.0 && x.fract() == 0.0)
                .then_some(x as usize)
                .ok_or_else(|| {
                    runtime_error(format!(
                        "{what}: a training timestep is a whole number >= 0, got {x}"
                    ))
                })
        })
        .collect()
}

fn predict(m: &mut Model, x: Tensor, t: Dynamic, ctx: Option<Tensor>) -> RhaiResult<Tensor> {
    predict_with(m, x, t, ctx, None)
}

fn predict_with(
    m: &mut Model,
    x: Tensor,
    t: Dynamic,
    ctx: Option<Tensor>,
    added: Option<AddedConditions>,
) -> RhaiResult<Tensor> {
    let t = timesteps(&t, "model.predict")?;
    m.with_layer::<UNet, _>("predict", |u| {
        guard(|| u.predict_with(&x, &t, ctx.as_ref(), added.as_ref()))
    })
}

crate::options! {
    /// SDXL's `added_cond_kwargs`; both are required.
    struct AddedConditionOptions {
        text_embeds: Tensor,
        time_ids: Tensor,
    }
}

/// SDXL's `added_cond_kwargs` as a map: `#{ text_embeds, time_ids }`.
fn added_conditions(opts: Map) -> RhaiResult<AddedConditions> {
    let o = AddedConditionOptions::parse("model.predict", opts)?;
    let required = |t: Option<Tensor>, key: &str| -> RhaiResult<Tensor> {
        t.ok_or_else(|| runtime_error(format!("model.predict: {key} (a tensor) is required")))
    };
    Ok(AddedConditions {
        text_embeds: required(o.text_embeds, "text_embeds")?,
        time_ids: required(o.time_ids, "time_ids")?,
    })
}

fn index(i: INT, what: &str) -> RhaiResult<usize> {
    usize::try_from(i)
        .map_err(|_| runtime_error(format!("{what}: a step index is not negative, got {i}")))
}

pub fn register(engine: &mut Engine) {
    engine.register_type_with_name::<SchedulerHandle>("Scheduler");
    engine.register_type_with_name::<PipelineHandle>("Pipeline");
    let getters: [Getter; 6] = [
        (
            "timesteps",
            "scheduler.timesteps -> array",
            "The inference timesteps in walking order, in the denoiser's units (training timesteps; the Euler and flow schedulers' may be fractional).",
            |h| h.with(|s, _| s.timesteps().iter().map(|&t| Dynamic::from_float(t)).collect::<Array>().into()),
        ),
        (
            "step_index",
            "scheduler.step_index -> int",
            "The step the walk is at: the index into timesteps of the next step.",
            |h| h.with(|s, _| Dynamic::from_int(s.step_index() as INT)),
        ),
        (
            "init_noise_sigma",
            "scheduler.init_noise_sigma -> float",
            "The scale of the starting noise: the first latents are randn times this (1, or the largest σ for the Euler schedulers).",
            |h| h.with(|s, _| Dynamic::from_float(s.init_noise_sigma())),
        ),
        (
            "num_train_timesteps",
            "scheduler.num_train_timesteps -> int",
            "How many timesteps the noise schedule was trained over (1000 for Stable Diffusion's): a training loop draws its timesteps below it. () for flow matching, which has no such table.",
            |h| {
                h.with(|s, _| match s.noise_schedule() {
                    Some(n) => Dynamic::from_int(n.alphas_cumprod.len() as INT),
                    None => Dynamic::UNIT,
                })
            },
        ),
        (
            "prediction_type",
            "scheduler.prediction_type -> string",
            "What the denoiser predicts, by diffusers' name: \"epsilon\" (the noise), \"v_prediction\" or \"sample\"; \"flow\" for flow matching (the velocity of the flow). What a training loop's target is: the noise, or scheduler.velocity(x0, noise, t).",
            |h| {
                use rusting_brain::models::diffusion::scheduler::Prediction;
                h.with(|s, _| {
                    Dynamic::from(
                        match s.prediction() {
                            Some(Prediction::Epsilon) => "epsilon",
                            Some(Prediction::Velocity) => "v_prediction",
                            Some(Prediction::Sample) => "sample",
                            None => "flow",
                        }
                        .to_string(),
                    )
                })
            },
        ),
        (
            "class_name",
            "scheduler.class_name -> string",
            "diffusers' class name of the scheduler (DDIMScheduler, EulerDiscreteScheduler, ...).",
            |h| h.with(|s, _| Dynamic::from(s.class_name().to_string())),
        ),
    ];
    for (name, signature, doc, f) in getters {
        engine.register_get(name, f);
        help::getter(
            name,
            signature,
            doc,
            "let s = diffusion::scheduler(#{ _class_name: \"EulerDiscreteScheduler\" }, #{ steps: 4 }); print(s.timesteps); print(s.init_noise_sigma);",
        );
    }
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("diffusion"));
        api.func(
            "load",
            "diffusion::load(dir) -> Pipeline",
            "A Stable Diffusion pipeline from a diffusers folder: SD 1.x and 2.x (StableDiffusionPipeline: model_index.json with unet/, vae/, text_encoder/ (CLIPTextModel), tokenizer/ and scheduler/), SDXL (StableDiffusionXLPipeline: also text_encoder_2/ (CLIPTextModelWithProjection) and tokenizer_2/) SD3 and SD3.5 (StableDiffusion3Pipeline: transformer/ (SD3Transformer2DModel) for unet/, two CLIP encoders with projections, text_encoder_3/ (T5EncoderModel, optional) and tokenizer_3/) or FLUX.1 (FluxPipeline: transformer/ (FluxTransformer2DModel), text_encoder/ (CLIP), text_encoder_2/ (T5)). pipe.generate(prompt, opts) draws images; pipe.to(\"cuda\") moves it. Every weight is required by name and shape; a missing component folder is named.",
            "try { diffusion::load(\"no_such_folder\"); } catch (e) { print(e); }   // with a real folder: let pipe = diffusion::load(\"stable-diffusion-v1-5\"); vision::save_image(pipe.generate(\"a red fox\", #{ steps: 25, seed: 1 }), \"fox.png\");",
            |dir: &str| -> RhaiResult<PipelineHandle> {
                guard(|| StableDiffusion::from_folder(std::path::Path::new(dir)))
                    .map(|p| PipelineHandle(Arc::new(p)))
            },
        );
        api.method(
            "generate",
            "pipe.generate(prompt, #{ steps, guidance, true_cfg, seed, width, height, scheduler, negative, eta, image, strength, mask, tiled, max_sequence_length, cuda_graph, progress }) -> Tensor",
            "Text to image: a U8 [H, W, 3] image for a prompt, or a list of images for a list of prompts. steps (50, SD3 and FLUX 28) denoising steps of the folder's scheduler (or scheduler: another class over its noise schedule), classifier-free guidance (7.5, SDXL 5, SD3 7; 1 turns it off; FLUX-dev takes it as an input, 3.5; FLUX's true_cfg above 1 adds a pass on the negative prompt mixed at that scale, as diffusers' true_cfg_scale), negative prompt(s) (without one SDXL's unconditional input is zeros, as its force_zeros_for_empty_prompt says), seed (0) for the starting noise, width and height (the model's size by default; multiples of 8, 16 for SD3 and FLUX), DDIM's eta, a progress bar (progress: false hides it). Image to image: image (a path or a U8 image; resized to the width and height, or its own size rounded down to multiples of 8, 16 for SD3 and FLUX) is encoded and noised strength (0.8; 1 with a mask) of the way, and only that share of the steps runs (rounded as each diffusers pipeline rounds it). Inpainting: mask (a path or a U8 image, white where to redraw; resized to the image) with image redraws only the mask's inside (strength 1: from pure noise there). tiled: true decodes with the VAE tile by tile (diffusers' enable_tiling), for images larger than the VAE was made for in bounded memory. Prompts longer than the text encoder's context are cut with a warning; max_sequence_length (256, FLUX 512) is how many tokens T5 reads. On CUDA each denoising step after the first replays one captured CUDA graph (cuda_graph: false runs it op by op).",
            "try { let pipe = diffusion::load(\"sd\"); pipe.generate(\"a red fox\", #{ steps: 20, guidance: 7.5, seed: 3, width: 512, height: 512 }); } catch (e) { print(e); }",
            generate,
        );
        api.method(
            "generate",
            "pipe.generate(prompt) -> Tensor",
            "generate with the pipeline's defaults (steps and guidance as generate says, seed 0).",
            "try { diffusion::load(\"sd\").generate(\"a red fox\"); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, prompts: Dynamic| generate(p, prompts, Map::new()),
        );
        api.method(
            "encode_prompt",
            "pipe.encode_prompt(prompts) -> map",
            "The text encoders' conditioning of a list of prompts, as the denoiser reads it: #{ states: [N, T, width], pooled: [N, P] (SDXL, SD3, FLUX) or () }, padded to the encoders' context. Nothing is recorded: what a training loop feeds a UNet's predict.",
            "try { diffusion::load(\"sd\").encode_prompt([\"a red fox\"]); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, prompts: Array| -> RhaiResult<Map> {
                let list = crate::convert::string_list(&prompts, "pipe.encode_prompt prompts")?;
                let refs: Vec<&str> = list.iter().map(String::as_str).collect();
                let cond = guard(|| rusting_brain::no_grad(|| p.0.encode_prompts(&refs, None)))?;
                let mut out = Map::new();
                out.insert("states".into(), Dynamic::from(cond.states));
                out.insert(
                    "pooled".into(),
                    cond.pooled.map_or(Dynamic::UNIT, Dynamic::from),
                );
                Ok(out)
            },
        );
        api.method(
            "encode_images",
            "pipe.encode_images(images, seed) -> Tensor",
            "Images [N, 3, H, W] in [-1, 1] as the denoiser's clean latents: a draw (by seed) of the VAE's latent distribution, scaled by its scaling_factor (and shift), as diffusers' training scripts make them. Nothing is recorded.",
            "try { diffusion::load(\"sd\").encode_images(zeros([1, 3, 64, 64]), 0); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, images: Tensor, seed: rhai::INT| -> RhaiResult<Tensor> {
                guard(|| p.0.image_latents(&images, &mut Generator::new(seed as u64)))
            },
        );
        api.method(
            "add_lora",
            "pipe.add_lora(path, strength) -> map",
            "Merges a LoRA file into the denoiser (the UNet, or SD3's and FLUX's transformer) and the text encoders with strength (as diffusers' load_lora_weights then fuse_lora(lora_scale)): diffusers/PEFT files (unet./transformer./text_encoder./text_encoder_2., lora_A/lora_B) and kohya's (lora_unet_/lora_te_/lora_te1_/lora_te2_, lora_down/lora_up with alpha). Returns #{ unet, text_encoder }: the modules changed (text_encoder counts both of SDXL's). A LoRA for another base model is refused by name and changes nothing.",
            "try { diffusion::load(\"sd\").add_lora(\"style.safetensors\", 0.8); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, path: &str, strength: f64| -> RhaiResult<Map> {
                let (u, t) = guard(|| p.0.add_lora(std::path::Path::new(path), strength))?;
                let mut m = Map::new();
                m.insert("unet".into(), Dynamic::from_int(u as INT));
                m.insert("text_encoder".into(), Dynamic::from_int(t as INT));
                Ok(m)
            },
        );
        api.method(
            "add_textual_inversion",
            "pipe.add_textual_inversion(path) -> map",
            "Adds a textual-inversion embedding's token to the tokenizers and text encoders, as diffusers' load_textual_inversion does: diffusers' files (one tensor named by its token), Automatic1111's (emb_params or string_to_param; the token is the file's name) and SDXL's (clip_l and clip_g, one for each encoder). n vectors become the tokens <tok>, <tok>_1, ... and a prompt's <tok> reads as all of them. Returns #{ token, vectors }. An embedding of another width (another base model) or a token the tokenizer has is refused by name and changes nothing.",
            "try { diffusion::load(\"sd\").add_textual_inversion(\"cat_toy.safetensors\"); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, path: &str| add_textual_inversion(p, path, None),
        );
        api.method(
            "add_textual_inversion",
            "pipe.add_textual_inversion(path, token) -> map",
            "add_textual_inversion under the given token instead of the file's.",
            "try { diffusion::load(\"sd\").add_textual_inversion(\"style.safetensors\", \"<my-style>\"); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, path: &str, token: &str| {
                add_textual_inversion(p, path, Some(token))
            },
        );
        api.method(
            "to",
            "pipe.to(device) -> Pipeline",
            "Moves the pipeline's models to a device (\"cuda\", \"cuda:1\", \"cpu\").",
            "try { diffusion::load(\"sd\").to(\"cuda\"); } catch (e) { print(e); }",
            |p: &mut PipelineHandle, device: &str| -> RhaiResult<PipelineHandle> {
                let d = crate::convert::device(device)?;
                guard(|| p.0.to_device(d))?;
                Ok(p.clone())
            },
        );
        let classes = sched::CLASSES.join(", ");
        api.func(
            "scheduler",
            "diffusion::scheduler(config, #{ class, steps, seed, eta }) -> Scheduler",
            &format!("A sampler with diffusers' semantics from a diffusers folder (its scheduler/scheduler_config.json), a scheduler_config.json path, or a map of its fields; class picks another scheduler over the same noise schedule (as diffusers' from_config). Classes: {classes}. steps calls set_timesteps; seed seeds the noise of stochastic steps (DDPM, Euler ancestral, SDE DPM-Solver, DDIM with eta > 0); eta is DDIM's."),
            "let s = diffusion::scheduler(#{ _class_name: \"DDIMScheduler\", beta_schedule: \"scaled_linear\", beta_start: 0.00085, beta_end: 0.012 }, #{ steps: 10 }); print(s.timesteps);",
            scheduler,
        );
        api.func(
            "scheduler",
            "diffusion::scheduler(config) -> Scheduler",
            "A scheduler from its config (see the form with options).",
            "let s = diffusion::scheduler(#{ _class_name: \"DPMSolverMultistepScheduler\" }); s.set_timesteps(20); print(s.timesteps.len());",
            |config: Dynamic| scheduler(config, Map::new()),
        );
        api.func(
            "save_lora",
            "diffusion::save_lora(model, path) -> int",
            "Writes a UNet's LoRA adapters (model.lora) as a file diffusers' load_lora_weights reads (and pipe.add_lora): unet.<layer>.lora_A.weight and lora_B.weight, the adapters' alpha / rank folded into B. Returns how many layers it holds.",
            "let unet = diffusion::unet(#{ _class_name: \"UNet2DConditionModel\", sample_size: 8, in_channels: 4, out_channels: 4, block_out_channels: [8, 16], layers_per_block: 1, down_block_types: [\"CrossAttnDownBlock2D\", \"DownBlock2D\"], up_block_types: [\"UpBlock2D\", \"CrossAttnUpBlock2D\"], cross_attention_dim: 8, norm_num_groups: 4, attention_head_dim: 2 }); unet.lora(#{ targets: [\"to_q\", \"to_v\"], rank: 2 }); print(diffusion::save_lora(unet, \"lora.safetensors\"));",
            |model: Model, path: &str| -> RhaiResult<rhai::INT> {
                let mut g = model.lock();
                guard(|| {
                    rusting_brain::models::diffusion::lora::save_lora(
                        g.as_mut(),
                        "unet",
                        std::path::Path::new(path),
                    )
                })
                .map(|n| n as rhai::INT)
            },
        );
        api.func(
            "unet",
            "diffusion::unet(config, #{ seed }) -> Model",
            "A diffusers UNet (UNet2DModel, or UNet2DConditionModel for text): from a diffusers folder (unet/ of a pipeline too), or a fresh one, PyTorch's init from seed, from a map of config.json's fields (_class_name, block_out_channels, down_block_types, up_block_types, layers_per_block, attention_head_dim, norm_num_groups, cross_attention_dim, ...). model.predict(x, t) gives its prediction; model.save_pretrained(dir) writes a folder diffusers reads; it trains as any model.",
            "let u = diffusion::unet(#{ _class_name: \"UNet2DModel\", in_channels: 3, out_channels: 3, block_out_channels: [8, 16], down_block_types: [\"DownBlock2D\", \"AttnDownBlock2D\"], up_block_types: [\"AttnUpBlock2D\", \"UpBlock2D\"], layers_per_block: 1, norm_num_groups: 4, attention_head_dim: 8 }); print(u.predict(randn([1, 3, 8, 8]), 10).shape);",
            unet,
        );
        api.func(
            "unet",
            "diffusion::unet(config) -> Model",
            "diffusion::unet with seed 0.",
            "try { diffusion::unet(\"no_such_folder\"); } catch (e) { print(e); }",
            |config: Dynamic| unet(config, Map::new()),
        );
        api.method(
            "predict",
            "model.predict(x, t) -> Tensor",
            "A diffusers UNet's prediction (noise, v or the sample, as it was trained) for noisy samples x [N, C, H, W] at timesteps t (a number for all, or one per sample as a list or tensor). Unconditional UNets only; text-conditioned ones take the text states as a third argument.",
            "let u = diffusion::unet(#{ _class_name: \"UNet2DModel\", in_channels: 1, out_channels: 1, block_out_channels: [8], down_block_types: [\"DownBlock2D\"], up_block_types: [\"UpBlock2D\"], layers_per_block: 1, norm_num_groups: 4 }); print(u.predict(randn([2, 1, 4, 4]), [1, 500]).shape);",
            |m: &mut Model, x: Tensor, t: Dynamic| predict(m, x, t, None),
        );
        api.method(
            "predict",
            "model.predict(x, t, text_states) -> Tensor",
            "A text-conditioned UNet's prediction under text states [N, S, cross_attention_dim] (the text encoder's last hidden states).",
            "try { let u = diffusion::unet(\"sd/unet\"); u.predict(randn([1, 4, 64, 64]), 999, randn([1, 77, 768])); } catch (e) { print(e); }",
            |m: &mut Model, x: Tensor, t: Dynamic, ctx: Tensor| predict(m, x, t, Some(ctx)),
        );
        api.method(
            "predict",
            "model.predict(x, t, text_states, #{ text_embeds, time_ids }) -> Tensor",
            "An SDXL UNet's prediction (addition_embed_type text_time): besides the text states, the second text encoder's pooled and projected embedding text_embeds [N, P] and the size numbers time_ids [N, 6] (original height and width, crop top and left, target height and width).",
            "try { let u = diffusion::unet(\"sdxl/unet\"); u.predict(randn([1, 4, 128, 128]), 999, randn([1, 77, 2048]), #{ text_embeds: randn([1, 1280]), time_ids: tensor([[1024.0, 1024.0, 0.0, 0.0, 1024.0, 1024.0]]) }); } catch (e) { print(e); }",
            |m: &mut Model, x: Tensor, t: Dynamic, ctx: Tensor, added: Map| {
                predict_with(m, x, t, Some(ctx), Some(added_conditions(added)?))
            },
        );
        api.func(
            "schedulers",
            "diffusion::schedulers() -> array",
            "The scheduler classes diffusion::scheduler builds.",
            "print(diffusion::schedulers());",
            || -> Array {
                sched::CLASSES
                    .iter()
                    .map(|c| Dynamic::from(c.to_string()))
                    .collect()
            },
        );
        api.method(
            "set_timesteps",
            "scheduler.set_timesteps(steps) -> ()",
            "Places steps inference timesteps (diffusers' spacing for the config) and starts the walk at the first.",
            "let s = diffusion::scheduler(#{ _class_name: \"EulerDiscreteScheduler\" }); s.set_timesteps(30); print(s.timesteps[0]);",
            |h: &mut SchedulerHandle, steps: INT| -> RhaiResult<()> {
                let steps = index(steps, "set_timesteps")?;
                h.with(|s, _| guard(|| s.set_timesteps(steps)))
            },
        );
        api.method(
            "set_begin_index",
            "scheduler.set_begin_index(i) -> ()",
            "Starts the walk at step i (image-to-image starts part way, at the noise level add_noise gave).",
            "let s = diffusion::scheduler(#{ _class_name: \"DDIMScheduler\" }, #{ steps: 10 }); s.set_begin_index(4); print(s.step_index);",
            |h: &mut SchedulerHandle, i: INT| -> RhaiResult<()> {
                let i = index(i, "set_begin_index")?;
                h.with(|s, _| guard(|| s.set_begin_index(i)))
            },
        );
        api.method(
            "scale_model_input",
            "scheduler.scale_model_input(sample) -> Tensor",
            "The sample as the denoiser sees it at the current step (the Euler schedulers divide by sqrt(sigma^2 + 1); the others pass it through).",
            "let s = diffusion::scheduler(#{ _class_name: \"EulerDiscreteScheduler\" }, #{ steps: 4 }); print(s.scale_model_input(ones([1, 4, 2, 2])).max());",
            |h: &mut SchedulerHandle, x: Tensor| h.with(|s, _| guard(|| s.scale_model_input(&x))),
        );
        api.method(
            "step",
            "scheduler.step(model_output, sample) -> Tensor",
            "The next sample from the denoiser's output at the current step, and the walk moves on: a sampling loop is `for t in s.timesteps { let out = unet(s.scale_model_input(x), t); x = s.step(out, x); }`. Stochastic schedulers draw their noise from the scheduler's seed.",
            "let s = diffusion::scheduler(#{ _class_name: \"DDIMScheduler\" }, #{ steps: 4 }); let x = randn([1, 4, 2, 2]); for t in s.timesteps { x = s.step(x * 0.1, x); } print(x.shape);",
            |h: &mut SchedulerHandle, out: Tensor, x: Tensor| {
                h.with(|s, gen| guard(|| s.step(&out, &x, gen)))
            },
        );
        api.method(
            "add_noise",
            "scheduler.add_noise(sample, noise, i) -> Tensor",
            "Clean samples noised to the level of inference step i (image-to-image: start at step i from these).",
            "let s = diffusion::scheduler(#{ _class_name: \"EulerDiscreteScheduler\" }, #{ steps: 10 }); let x = s.add_noise(zeros([1, 4, 2, 2]), randn([1, 4, 2, 2]), 3); print(x.shape);",
            |h: &mut SchedulerHandle, x: Tensor, noise: Tensor, i: INT| -> RhaiResult<Tensor> {
                let i = index(i, "add_noise")?;
                h.with(|s, _| guard(|| s.add_noise(&x, &noise, i)))
            },
        );
        api.method(
            "add_noise_at",
            "scheduler.add_noise_at(x0, noise, timesteps) -> Tensor",
            "Training inputs: clean samples x0 [N, ...] noised to training timesteps (one per sample, a list or an integer tensor in [0, num_train_timesteps)): sqrt(a_t) x0 + sqrt(1 - a_t) noise, as diffusers' add_noise in a training loop. Schedulers with a beta schedule only (not flow matching).",
            "let s = diffusion::scheduler(#{ _class_name: \"DDPMScheduler\" }); let x = s.add_noise_at(zeros([2, 1, 2, 2]), randn([2, 1, 2, 2]), [10, 999]); print(x.shape);",
            |h: &mut SchedulerHandle, x0: Tensor, noise: Tensor, t: Dynamic| -> RhaiResult<Tensor> {
                let t = training_steps(&t, "add_noise_at")?;
                h.with(|s, _| {
                    let sched = s.noise_schedule().ok_or_else(|| runtime_error(format!("add_noise_at: {} has no beta schedule to noise with", s.class_name())))?;
                    guard(|| sched.add_noise(&x0, &noise, &t))
                })
            },
        );
        api.method(
            "velocity",
            "scheduler.velocity(x0, noise, timesteps) -> Tensor",
            "The v-prediction target at training timesteps: sqrt(a_t) noise - sqrt(1 - a_t) x0 (diffusers' get_velocity).",
            "let s = diffusion::scheduler(#{ _class_name: \"DDPMScheduler\" }); print(s.velocity(zeros([1, 2]), ones([1, 2]), [500]));",
            |h: &mut SchedulerHandle, x0: Tensor, noise: Tensor, t: Dynamic| -> RhaiResult<Tensor> {
                let t = training_steps(&t, "velocity")?;
                h.with(|s, _| {
                    let sched = s.noise_schedule().ok_or_else(|| runtime_error(format!("velocity: {} has no beta schedule", s.class_name())))?;
                    guard(|| sched.velocity(&x0, &noise, &t))
                })
            },
        );
        api.method(
            "set_image_tokens",
            "scheduler.set_image_tokens(n) -> ()",
            "FLUX's dynamic shifting: the number of latent image tokens, which sets the shift of the timesteps (call before set_timesteps). Other schedulers ignore it.",
            "let s = diffusion::scheduler(#{ _class_name: \"FlowMatchEulerDiscreteScheduler\", use_dynamic_shifting: true }); s.set_image_tokens(1024); s.set_timesteps(4); print(s.timesteps);",
            |h: &mut SchedulerHandle, n: INT| -> RhaiResult<()> {
                let n = index(n, "set_image_tokens")?;
                h.with(|s, _| s.set_image_tokens(n));
                Ok(())
            },
        );
    }
    engine.register_static_module("diffusion", module.into());
}
