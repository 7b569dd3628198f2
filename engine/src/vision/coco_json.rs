//! Detections as COCO-style JSON, the `predictions.json` ultralytics' validator writes with
//! `save_json=True`: one record per kept box, with
//! - `image_id`: the file stem as a number when it is all digits, else the stem;
//! - `file_name`: the image's file name;
//! - `category_id`: COCO's 91-class id for a COCO val2017/test-dev2017 list, else class + 1;
//! - `bbox`: [x, y, w, h], the top-left corner and size in the original image's pixels, rounded
//!   to 3 decimals (computed in f32, as ultralytics does on its f32 tensors);
//! - `score`: the confidence rounded to 5 decimals.

use super::boxes::Box4;
use crate::{Error, Result};
use serde_json::{json, Value};
use std::path::Path;

/// COCO's category ids of the 80 classes detectors train on, in class order.
pub const COCO80_TO_91: [usize; 80] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28,
    31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55,
    56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84,
    85, 86, 87, 88, 89, 90,
];

/// The category id of each class: COCO's ids when the validation list is COCO's own (a path
/// naming coco and ending in val2017.txt or test-dev2017.txt, ultralytics' test), else 1-based.
pub fn class_map(val_list: &Path, classes: usize) -> Vec<usize> {
    let text = val_list.to_string_lossy();
    let coco = text.contains("coco")
        && (text.ends_with("/val2017.txt") || text.ends_with("/test-dev2017.txt"));
    if coco && classes <= COCO80_TO_91.len() {
        COCO80_TO_91[..classes].to_vec()
    } else {
        (1..=classes).collect()
    }
}

fn round_to(v: f32, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (v as f64 * scale).round() / scale
}

/// The records of one image's detections: corner boxes in original pixels, their scores and
/// classes.
pub fn image_records(
    image: &Path,
    boxes: &[Box4],
    scores: &[f32],
    classes: &[usize],
    class_map: &[usize],
) -> Result<Vec<Value>> {
    let stem = image
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let image_id = match stem.parse::<u64>() {
        Ok(n) if stem.bytes().all(|b| b.is_ascii_digit()) => json!(n),
        _ => json!(stem),
    };
    let file_name = image
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    boxes
        .iter()
        .zip(scores)
        .zip(classes)
        .map(|((b, &score), &class)| {
            let category = *class_map.get(class).ok_or_else(|| {
                Error::invalid(
                    "coco json",
                    format!(
                        "class {class} has no category id ({} classes)",
                        class_map.len()
                    ),
                )
            })?;
            let (w, h) = (b[2] - b[0], b[3] - b[1]);
            // ultralytics: xyxy -> center xywh, then the center minus half the size.
            let (cx, cy) = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
            let bbox = [cx - w / 2.0, cy - h / 2.0, w, h].map(|v| round_to(v, 3));
            Ok(json!({
                "image_id": image_id,
                "file_name": file_name,
                "category_id": category,
                "bbox": bbox,
                "score": round_to(score, 5),
            }))
        })
        .collect()
}

/// Writes the records as one JSON array.
pub fn write(path: &Path, records: &[Value]) -> Result<()> {
    let text =
        serde_json::to_string(records).map_err(|e| Error::invalid("coco json", e.to_string()))?;
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_the_top_left_box_the_category_and_the_rounded_score() {
        let records = image_records(
            Path::new("/data/images/val/000000000139.jpg"),
            &[[10.0, 20.0, 40.0, 60.0]],
            &[0.876_543_2],
            &[2],
            &class_map(Path::new("/data/coco/val2017.txt"), 80),
        )
        .unwrap();
        let r = &records[0];
        assert_eq!(r["image_id"], json!(139));
        assert_eq!(r["file_name"], json!("000000000139.jpg"));
        assert_eq!(r["category_id"], json!(3));
        assert_eq!(r["bbox"], json!([10.0, 20.0, 30.0, 40.0]));
        assert_eq!(r["score"], json!(0.87654));
    }

    #[test]
    fn other_datasets_number_classes_from_one_and_keep_named_stems() {
        let map = class_map(Path::new("/data/shapes/images/val"), 3);
        assert_eq!(map, vec![1, 2, 3]);
        let records =
            image_records(Path::new("val_00001.jpg"), &[[0.0; 4]], &[0.5], &[0], &map).unwrap();
        assert_eq!(records[0]["image_id"], json!("val_00001"));
        assert_eq!(records[0]["category_id"], json!(1));
        let bad = image_records(Path::new("a.jpg"), &[[0.0; 4]], &[0.5], &[3], &map);
        assert!(bad.unwrap_err().to_string().contains("class 3"));
    }
}
