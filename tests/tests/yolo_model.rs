//! The YOLO builder against ultralytics' own model YAMLs (fetched, not committed): the same
//! layers as our built-in definitions, and the parameter counts ultralytics prints.

use rb_integration_tests::assets::asset;
use rusting_brain::models::yolo::{YoloConfig, YoloModel};
use rusting_brain::nn::Module;
use rusting_brain::Generator;

fn count(path: &std::path::Path, scale: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    let cfg = YoloConfig::from_yaml_str(&text, "yaml", Some(scale), None).unwrap();
    let m = YoloModel::build(&cfg, vec![], false, &mut Generator::new(0)).unwrap();
    m.num_parameters()
}

#[test]
fn yolo11_parameter_counts_match_ultralytics_summary() {
    let Some(yaml) = asset(
        "yolo11_parameter_counts",
        "ultralytics/cfg/models/11/yolo11.yaml",
    ) else {
        return;
    };
    // ultralytics' summaries count the frozen DFL weights (16) among parameters, not gradients;
    // these are its "gradients" figures, the trainable parameters.
    assert_eq!(count(&yaml, "n"), 2_624_064);
    assert_eq!(count(&yaml, "s"), 9_458_736);
}

#[test]
fn yolov8_parameter_counts_match_ultralytics_summary() {
    let Some(yaml) = asset(
        "yolov8_parameter_counts",
        "ultralytics/cfg/models/v8/yolov8.yaml",
    ) else {
        return;
    };
    assert_eq!(count(&yaml, "n"), 3_157_184);
    assert_eq!(count(&yaml, "s"), 11_166_544);
}

#[test]
fn builtin_definitions_have_the_layers_of_ultralytics_yamls() {
    for (rel, name) in [
        ("ultralytics/cfg/models/11/yolo11.yaml", "yolo11x.yaml"),
        ("ultralytics/cfg/models/v8/yolov8.yaml", "yolov8l.yaml"),
    ] {
        let Some(yaml) = asset("builtin_definitions", rel) else {
            return;
        };
        let text = std::fs::read_to_string(&yaml).unwrap();
        let scale = &name[name.len() - 6..name.len() - 5];
        let theirs = YoloConfig::from_yaml_str(&text, rel, Some(scale), None).unwrap();
        let ours = YoloConfig::from_file(std::path::Path::new(name), None).unwrap();
        assert_eq!(ours.layers, theirs.layers, "{name}");
        assert_eq!(
            (ours.depth, ours.width, ours.max_channels),
            (theirs.depth, theirs.width, theirs.max_channels)
        );
    }
}
