//! The `vision::` namespace: images as U8 [H, W, 3] RGB tensors on the host, the letterbox
//! YOLO models take, and boxes drawn with their labels.

use crate::error::{guard, runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Array, Dynamic, Engine, Map, Module};
use rusting_brain::models::resnet::{ResNet, ResNetConfig};
use rusting_brain::models::yolo::predict::predict_letterbox;
use rusting_brain::vision::image::{rgb_to_tensor, tensor_to_rgb};
use rusting_brain::vision::{class_color, draw_boxes, DrawBox};
use rusting_brain::{Generator, Tensor};

/// One detection map (`model.predict`'s rows, or any map with `box` and optional `name`,
/// `class`, `confidence`) as a box to draw.
fn draw_box(d: &Dynamic, i: usize) -> RhaiResult<DrawBox> {
    let m = d.clone().try_cast::<Map>().ok_or_else(|| {
        runtime_error(format!(
            "vision::draw_boxes: item {i} must be a map with `box`"
        ))
    })?;
    let b = m
        .get("box")
        .and_then(|b| b.clone().into_array().ok())
        .ok_or_else(|| {
            runtime_error(format!(
                "vision::draw_boxes: item {i} has no `box` [x1, y1, x2, y2]"
            ))
        })?;
    let v: Vec<f32> = b
        .iter()
        .map(|x| crate::convert::number(x, "vision::draw_boxes box").map(|f| f as f32))
        .collect::<RhaiResult<_>>()?;
    if v.len() != 4 {
        return Err(runtime_error(format!(
            "vision::draw_boxes: item {i}'s box needs 4 numbers, got {}",
            v.len()
        )));
    }
    let class = m
        .get("class")
        .and_then(|c| c.as_int().ok())
        .unwrap_or(0)
        .max(0) as usize;
    let name = m
        .get("name")
        .map(|n| n.to_string())
        .unwrap_or_else(|| class.to_string());
    let label = match m.get("confidence").and_then(|c| c.as_float().ok()) {
        Some(c) => format!("{name} {c:.2}"),
        None => name,
    };
    Ok(DrawBox {
        xyxy: [v[0], v[1], v[2], v[3]],
        label,
        color: class_color(class),
    })
}

fn draw(image: Tensor, dets: Array) -> RhaiResult<Tensor> {
    let boxes = dets
        .iter()
        .enumerate()
        .map(|(i, d)| draw_box(d, i))
        .collect::<RhaiResult<Vec<_>>>()?;
    guard(|| draw_boxes(&image, &boxes))
}

crate::options! {
    struct LetterboxOptions {
        imgsz: usize = 640,
        stride: usize = 32,
    }
}

fn letterbox(image: Tensor, opts: Map) -> RhaiResult<Tensor> {
    let LetterboxOptions { imgsz, stride } = LetterboxOptions::parse("vision::letterbox", opts)?;
    if imgsz == 0 || stride == 0 {
        return Err(runtime_error(
            "vision::letterbox: imgsz and stride must be positive",
        ));
    }
    guard(|| {
        let img = tensor_to_rgb(&image)?;
        rgb_to_tensor(predict_letterbox(&img, imgsz, stride).0)
    })
}

crate::options! {
    struct ResNetOptions {
        num_classes: usize = 1000,
        seed: rhai::INT = 0,
    }
}

/// torchvision's `resnet{depth}`, freshly initialised as torchvision does.
fn resnet(depth: rhai::INT, opts: Map) -> RhaiResult<crate::nn::Model> {
    let ResNetOptions {
        num_classes: classes,
        seed,
    } = ResNetOptions::parse("vision::resnet", opts)?;
    let depth = usize::try_from(depth)
        .map_err(|_| runtime_error(format!("vision::resnet: depth {depth} is negative")))?;
    let model = guard(|| {
        ResNet::new(
            ResNetConfig::depth(depth, classes)?,
            &mut Generator::new(seed as u64),
        )
    })?;
    Ok(crate::nn::Model::new(Box::new(model)))
}

pub fn register(engine: &mut Engine) {
    let mut module = Module::new();
    {
        let mut api = Api::new(&mut module, Some("vision"));
        api.func(
            "load",
            "vision::load(dir) -> Model",
            "An image model from a Hugging Face save_pretrained folder (config.json and model.safetensors, shards, or pytorch_model.bin, with its preprocessor_config.json and tokenizer files), by its model_type: vit, deit, dinov2, dinov2_with_registers, clip. m.classify(photos), m.embed_images(photos), m.preprocess(photos); CLIP adds m.embed_texts(texts) and m.zero_shot(photos, labels). forward(images [N, 3, H, W]) gives the logits, the pooled output or every token; another image size resamples the position table.",
            "try { vision::load(\"no_such_folder\"); } catch (e) { print(e); }   // with a real folder: let m = vision::load(\"vit-base-patch16-224\"); m.eval(); let logits = m.forward(images);",
            |dir: &str| {
                guard(|| {
                    rusting_brain::models::pretrained::load_image_model(std::path::Path::new(dir))
                })
                .map(crate::nn::Model::new)
            },
        );
        api.func(
            "resnet",
            "vision::resnet(depth, #{ num_classes, seed }) -> Model",
            "torchvision's ResNet (depth 18, 34, 50, 101 or 152; num_classes 1000) with torchvision's parameter names and init, so model.load_state_dict(io::load(\"resnet18.pth\")) takes a torch.save'd torchvision state dict. Images [N, 3, H, W] in, logits [N, num_classes] out.",
            "let m = vision::resnet(18, #{ num_classes: 10 }); m.eval(); print(m.forward(rand([1, 3, 32, 32])).shape);",
            resnet,
        );
        api.func(
            "read_image",
            "vision::read_image(path) -> Tensor",
            "Decodes a JPEG or PNG (EXIF orientation applied) into a U8 [H, W, 3] RGB tensor on the host.",
            "vision::save_image(zeros([4, 6, 3], #{ dtype: \"u8\" }), \"black.png\"); let img = vision::read_image(\"black.png\");",
            |p: &str| guard(|| rusting_brain::vision::read_image(p)),
        );
        api.func(
            "save_image",
            "vision::save_image(image, path)",
            "Writes a U8 [H, W, 3] image as PNG or JPEG, by the path's extension.",
            "vision::save_image(zeros([4, 6, 3], #{ dtype: \"u8\" }), \"black.png\");",
            |t: Tensor, p: &str| guard(|| rusting_brain::vision::save_image(&t, p)),
        );
        api.func(
            "letterbox",
            "vision::letterbox(image, #{ imgsz, stride }) -> Tensor",
            "Scales the long side to imgsz and pads with grey 114 to the next multiple of stride, as ultralytics' predictor does.",
            "let img = vision::letterbox(zeros([100, 200, 3], #{ dtype: \"u8\" }), #{ imgsz: 64 }); print(img.shape);",
            letterbox,
        );
        api.func(
            "draw_boxes",
            "vision::draw_boxes(image, detections) -> Tensor",
            "A copy of the image with each detection's box and label drawn (maps with box, and optionally name, class, confidence; model.predict's rows fit).",
            "let img = vision::draw_boxes(zeros([64, 64, 3], #{ dtype: \"u8\" }), [#{ box: [8, 8, 40, 40], name: \"cat\", confidence: 0.9 }]);",
            draw,
        );
        crate::vision_models::register(&mut api);
    }
    engine.register_static_module("vision", module.into());
}
