//! Methods of the image models (`vision::load`, `vision::resnet`): classification, image
//! embeddings, the checkpoint's preprocessing, and CLIP's text embeddings and zero-shot
//! classification. Images may be given as file paths, U8 [H, W, 3] tensors (a list of either)
//! or an already normalised float [N, C, H, W] batch.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use crate::nn::Model;
use rhai::{Array, Dynamic, Map};
use rusting_brain::models::diffusion::UNet;
use rusting_brain::models::image_text::{as_image_text_model, ImageTextModel};
use rusting_brain::models::pretrained::{as_image_model, top_classes, ClassScore, ImageModel};
use rusting_brain::models::vit::ViT;
use rusting_brain::vision::image::{read_rgb, tensor_to_rgb};
use rusting_brain::vision::RgbImage;
use rusting_brain::{no_grad, DType, Generator, Tensor};

/// One photo from a path or a U8 [H, W, 3] tensor.
fn photo(d: &Dynamic, what: &str) -> RhaiResult<RgbImage> {
    if let Some(path) = d.clone().try_cast::<String>() {
        return guard(|| read_rgb(&path));
    }
    if let Some(t) = d.clone().try_cast::<Tensor>() {
        if t.dtype() == DType::U8 && t.rank() == 3 {
            return guard(|| tensor_to_rgb(&t));
        }
    }
    Err(runtime_error(format!(
        "{what}: an image is a file path or a U8 [H, W, 3] tensor, got {}",
        d.type_name()
    )))
}

/// The model's input batch for `images` (see the module doc).
fn batch(m: &dyn ImageModel, images: &Dynamic, what: &str) -> RhaiResult<Tensor> {
    if let Some(t) = images.clone().try_cast::<Tensor>() {
        if t.dtype().is_float() {
            if t.rank() != 4 {
                return Err(runtime_error(format!(
                    "{what}: a float batch is [N, C, H, W], got {:?}",
                    t.shape()
                )));
            }
            return Ok(t);
        }
    }
    let photos = match images.clone().try_cast::<Array>() {
        Some(list) if list.is_empty() => {
            return Err(runtime_error(format!("{what}: the image list is empty")))
        }
        Some(list) => list
            .iter()
            .map(|d| photo(d, what))
            .collect::<RhaiResult<Vec<_>>>()?,
        None => vec![photo(images, what)?],
    };
    guard(|| m.preprocess(&photos))
}

/// Runs `f` on the image model behind the handle, or says the model is not one.
fn with_image_model<R>(
    model: &Model,
    what: &str,
    f: impl FnOnce(&dyn ImageModel) -> RhaiResult<R>,
) -> RhaiResult<R> {
    let guard = model.lock();
    match as_image_model(guard.as_ref()) {
        Some(m) => f(m),
        None => Err(runtime_error(format!(
            "{what} is a method of image models (vision::load, vision::resnet); this model is a {}",
            guard.title()
        ))),
    }
}

fn score_maps(rows: Vec<Vec<ClassScore>>) -> Array {
    rows.into_iter()
        .map(|row| {
            let row: Array = row
                .into_iter()
                .map(|c| {
                    let mut m = Map::new();
                    m.insert("label".into(), c.label.into());
                    m.insert("index".into(), (c.index as rhai::INT).into());
                    m.insert("score".into(), c.score.into());
                    Dynamic::from_map(m)
                })
                .collect();
            Dynamic::from_array(row)
        })
        .collect()
}

crate::options! {
    struct ClassifyOptions {
        topk: usize = 5,
    }
}

fn classify(model: &mut Model, images: Dynamic, opts: Map) -> RhaiResult<Array> {
    let topk = ClassifyOptions::parse("classify", opts)?.topk;
    with_image_model(model, "classify", |m| {
        let x = batch(m, &images, "classify")?;
        guard(|| m.classify(&x, topk)).map(score_maps)
    })
}

/// A non-empty list of labels or texts.
fn strings(list: &Array, what: &str) -> RhaiResult<Vec<String>> {
    if list.is_empty() {
        return Err(runtime_error(format!("{what}: the list is empty")));
    }
    crate::convert::string_list(list, what)
}

fn with_image_text_model<R>(
    model: &Model,
    what: &str,
    f: impl FnOnce(&dyn ImageTextModel) -> RhaiResult<R>,
) -> RhaiResult<R> {
    let guard = model.lock();
    match as_image_text_model(guard.as_ref()) {
        Some(m) => f(m),
        None => Err(runtime_error(format!(
            "{what} is a method of the image-text models (CLIP, SigLIP from vision::load); this model is a {}",
            guard.title()
        ))),
    }
}

crate::options! {
    /// The template defaults to the model's, topk to every label.
    struct ZeroShotOptions {
        template: String,
        topk: usize,
    }
}

fn zero_shot(model: &mut Model, images: Dynamic, labels: Array, opts: Map) -> RhaiResult<Array> {
    let ZeroShotOptions { template, topk } = ZeroShotOptions::parse("zero_shot", opts)?;
    let labels = strings(&labels, "zero_shot labels")?;
    let topk = topk.unwrap_or(labels.len());
    with_image_text_model(model, "zero_shot", |m| {
        let x = batch(m, &images, "zero_shot")?;
        let names: Vec<&str> = labels.iter().map(String::as_str).collect();
        let template = template.as_deref().unwrap_or(m.default_template());
        let probs = guard(|| no_grad(|| m.zero_shot(&x, &names, template)))?;
        guard(|| top_classes(&probs, &labels, topk)).map(score_maps)
    })
}

crate::options! {
    struct ContactSheetOptions {
        captions: Vec<String> = Vec::new(),
        cols: usize = 4,
        cell: usize = 160,
    }
}

fn contact_sheet(images: Array, opts: Map) -> RhaiResult<Tensor> {
    let ContactSheetOptions {
        captions,
        cols,
        cell,
    } = ContactSheetOptions::parse("vision::contact_sheet", opts)?;
    let photos = images
        .iter()
        .map(|d| photo(d, "vision::contact_sheet"))
        .collect::<RhaiResult<Vec<_>>>()?;
    let sheet = guard(|| {
        rusting_brain::vision::contact_sheet::contact_sheet(&photos, &captions, cols, cell)
    })?;
    guard(|| rusting_brain::vision::image::rgb_to_tensor(sheet))
}

crate::options! {
    struct SetClassesOptions {
        seed: rhai::INT = 0,
    }
}

fn set_classes(model: &mut Model, labels: Array, opts: Map) -> RhaiResult<()> {
    let seed = SetClassesOptions::parse("set_classes", opts)?.seed;
    let labels = strings(&labels, "set_classes")?;
    let mut gen = Generator::new(seed as u64);
    model.with_layer_mut::<ViT, _>("set_classes", |vit| {
        guard(|| vit.set_classes(labels, &mut gen))
    })
}

pub fn register(api: &mut Api) {
    api.func(
        "contact_sheet",
        "vision::contact_sheet(images, #{ captions, cols, cell }) -> Tensor",
        "Images (paths or U8 [H, W, 3] tensors) on a grid of cols (4) columns, each fitted into a cell x cell (160) square, centred on white, under its caption: a U8 [H, W, 3] image for vision::save_image (search results, a dataset preview).",
        "vision::save_image(zeros([20, 30, 3], #{ dtype: \"u8\" }), \"a.png\"); let sheet = vision::contact_sheet([\"a.png\", \"a.png\"], #{ captions: [\"one\", \"two\"], cols: 2, cell: 32 }); print(sheet.shape);",
        |images: Array, opts: Map| contact_sheet(images, opts),
    );
    api.method(
        "set_classes",
        "model.set_classes(labels, #{ seed }) -> ()",
        "ViT and DeiT: a fresh classifier on [CLS] for these class names (transformers' ViTForImageClassification head, PyTorch's Linear init drawn from seed, default 0), in place of the pooler or the old classifier: what fine-tuning on another set of classes starts from. classify() then names these classes.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.set_classes([\"cat\", \"dog\"], #{ seed: 1 }); } catch (e) { print(e); }",
        set_classes,
    );
    api.method(
        "set_classes",
        "model.set_classes(labels) -> ()",
        "set_classes with seed 0.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.set_classes([\"cat\", \"dog\"]); } catch (e) { print(e); }",
        |m: &mut Model, labels: Array| set_classes(m, labels, Map::new()),
    );
    api.method(
        "save_pretrained",
        "model.save_pretrained(dir) -> dir",
        "ViT and DeiT: writes config.json (the classes as id2label), model.safetensors with transformers' names and preprocessor_config.json, a folder transformers' from_pretrained and vision::load read. Merge LoRA adapters first (model.merge_lora()). A diffusers UNet (diffusion::unet): config.json and diffusion_pytorch_model.safetensors, a folder diffusers' from_pretrained and diffusion::unet read.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.save_pretrained(\"out/vit\"); } catch (e) { print(e); }",
        |model: &mut Model, dir: &str| -> RhaiResult<String> {
            let path = std::path::Path::new(dir);
            let unet = model.lock().as_any().is_some_and(|a| a.is::<UNet>());
            match unet {
                true => model.with_layer::<UNet, _>("save_pretrained", |u| {
                    guard(|| u.save_pretrained(path))
                })?,
                false => model.with_layer::<ViT, _>("save_pretrained", |vit| {
                    guard(|| vit.save_pretrained(path))
                })?,
            }
            Ok(dir.to_string())
        },
    );
    api.method(
        "classify",
        "model.classify(images, #{ topk }) -> array",
        "For each image (a path, a U8 [H, W, 3] tensor, a list of them, or a normalised [N, C, H, W] batch), its topk (5) most probable classes, best first, as #{ label, index, score }. Photos go through the checkpoint's preprocessor_config.json.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); m.eval(); print(m.classify(rand([1, 3, 32, 32]), #{ topk: 2 }));",
        classify,
    );
    api.method(
        "classify",
        "model.classify(images) -> array",
        "The top 5 classes of each image.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); m.eval(); print(m.classify(rand([1, 3, 32, 32]))[0][0].score);",
        |m: &mut Model, images: Dynamic| classify(m, images, Map::new()),
    );
    api.method(
        "embed_images",
        "model.embed_images(images) -> Tensor",
        "One embedding per image [N, D]: the pooled output (ViT's pooler or [CLS], DINOv2's [CLS], CLIP's projected image features, ResNet's pooled features). Images as for classify.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); m.eval(); print(m.embed_images(rand([2, 3, 32, 32])).shape);",
        |model: &mut Model, images: Dynamic| {
            with_image_model(model, "embed_images", |m| {
                let x = batch(m, &images, "embed_images")?;
                guard(|| no_grad(|| m.embed_images(&x)))
            })
        },
    );
    api.method(
        "preprocess",
        "model.preprocess(images) -> Tensor",
        "Photos (paths or U8 [H, W, 3] tensors) as the model's input [N, C, H, W], by its checkpoint's preprocessor_config.json: Pillow's resize (bicubic or bilinear, antialiased), centre crop, rescale and normalisation, as transformers' image processors.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.preprocess(zeros([8, 8, 3], #{ dtype: \"u8\" })); } catch (e) { print(e); }",
        |model: &mut Model, images: Dynamic| {
            with_image_model(model, "preprocess", |m| batch(m, &images, "preprocess"))
        },
    );
    api.method(
        "embed_texts",
        "model.embed_texts(texts) -> Tensor",
        "CLIP and SigLIP: the texts' embeddings in the images' space [N, D] (not normalised), tokenized by the checkpoint's tokenizer (tokenizer.json, vocab.json + merges.txt, or SigLIP's spiece.model) and cut to its context.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.embed_texts([\"a cat\"]); } catch (e) { print(e); }",
        |model: &mut Model, texts: Array| {
            let texts = strings(&texts, "embed_texts")?;
            with_image_text_model(model, "embed_texts", |m| {
                let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                guard(|| no_grad(|| m.embed_texts(&texts)))
            })
        },
    );
    api.method(
        "zero_shot",
        "model.zero_shot(images, labels, #{ template, topk }) -> array",
        "Zero-shot classification with CLIP or SigLIP: for each image, the labels by probability, best first, as #{ label, index, score }. Each label fills the template's {} (CLIP \"a photo of a {}.\", SigLIP \"This is a photo of {}.\" by default). CLIP's probabilities are a softmax over the labels; SigLIP scores each pair with its own sigmoid, so its need not sum to 1.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.zero_shot(\"bus.jpg\", [\"bus\", \"cat\"], #{ template: \"a photo of a {}\" }); } catch (e) { print(e); }",
        zero_shot,
    );
    api.method(
        "zero_shot",
        "model.zero_shot(images, labels) -> array",
        "zero_shot with the family's default template.",
        "let m = vision::resnet(18, #{ num_classes: 3 }); try { m.zero_shot(\"bus.jpg\", [\"bus\", \"cat\"]); } catch (e) { print(e); }",
        |m: &mut Model, images: Dynamic, labels: Array| zero_shot(m, images, labels, Map::new()),
    );
}
