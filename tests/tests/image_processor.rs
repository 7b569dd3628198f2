//! Checkpoints' image processors (`preprocessor_config.json`) on ultralytics' sample photos
//! give what transformers' Pillow processors give (`tests/fixtures/image_processor/
//! make_processed.py`): the resized and cropped 8-bit image bit for bit (Pillow's bicubic and
//! bilinear with their antialiasing, shortest-edge and exact sizes, a crop larger than the
//! image padded with zeros), and the normalised floats.

use rb_integration_tests::assets::asset;
use rusting_brain::vision::image::read_rgb;
use rusting_brain::vision::ImageProcessor;
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/image_processor")
        .join(name)
}

fn json(path: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn fnv(data: &[u8]) -> String {
    let h = data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    format!("{h:016x}")
}

#[test]
fn processors_resize_crop_and_normalise_as_transformers_pillow_backend() {
    let test = "processors_resize_crop_and_normalise_as_transformers_pillow_backend";
    let expected = json(fixture("expected.json"));
    for photo in ["bus.jpg", "zidane.jpg"] {
        let Some(path) = asset(test, &format!("ultralytics/assets/{photo}")) else {
            return;
        };
        let img = read_rgb(&path).unwrap();
        let want = &expected[photo];
        assert_eq!(
            fnv(img.as_raw()),
            want["decoded"],
            "{photo}: decoded pixels differ"
        );
        for name in ["clip", "vit", "dinov2", "grow", "pad"] {
            let config = json(fixture(&format!("{name}.json")));
            let p = ImageProcessor::from_json(&config).unwrap();
            let want = &want[name];
            let resized = p.resized(&img);
            assert_eq!(
                fnv(resized.as_raw()),
                want["resized"],
                "{photo} {name}: the 8-bit image differs from Pillow's"
            );
            let x = p.apply(&img).unwrap();
            let shape: Vec<usize> = want["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(x.shape(), shape, "{photo} {name}");
            let (h, w) = (shape[1], shape[2]);
            let values = x.to_vec_f32().unwrap();
            for (row, channels) in want["rows"].as_object().unwrap() {
                let r: usize = row.parse().unwrap();
                for (c, cols) in channels.as_array().unwrap().iter().enumerate() {
                    for (col, v) in cols.as_array().unwrap().iter().enumerate() {
                        let got = values[c * h * w + r * w + col] as f64;
                        let v = v.as_f64().unwrap();
                        assert!(
                            (got - v).abs() < 1e-6,
                            "{photo} {name}: channel {c} row {r} column {col}: {got} vs {v}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn bad_processor_configs_name_the_field() {
    for (v, needle) in [
        (
            serde_json::json!({"size": {"shortest_edge": 224}, "resample": 5}),
            "resample 5",
        ),
        (serde_json::json!({"do_resize": true}), "size"),
        (
            serde_json::json!({"size": 8, "image_mean": [0.5, 0.5], "image_std": [1, 1, 1]}),
            "image_mean",
        ),
        (
            serde_json::json!({"size": {"shortest_edge": 8, "longest_edge": 9}}),
            "longest_edge",
        ),
        (
            serde_json::json!({"size": 8, "image_mean": 0.5, "image_std": [1, 0, 1]}),
            "zero",
        ),
    ] {
        let err = ImageProcessor::from_json(&v).unwrap_err().to_string();
        assert!(err.contains(needle), "{v}: {err}");
    }
}
