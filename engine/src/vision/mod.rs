//! Computer vision: decoding images to U8 HWC RGB tensors, OpenCV-exact bilinear resize,
//! Pillow-exact resize and the checkpoints' image processors (preprocessor_config.json),
//! ultralytics' letterbox and rect batches, training augmentation (mosaic, affine, HSV,
//! flips), drawing boxes with labels, box arithmetic, non-maximum suppression and detection
//! metrics, following ultralytics' definitions so numbers can be compared.

pub mod augment;
pub mod boxes;
pub mod coco_json;
pub mod color_jitter;
pub mod contact_sheet;
pub mod draw;
mod exif;
pub mod image;
pub mod image_processor;
mod jpeg;
pub mod letterbox;
pub mod metrics;
pub mod nms;
pub mod pil_resize;
pub mod rect;
pub mod report;
pub mod resize;

pub use self::image::{decode_image, image_size, read_image, save_image};
/// The host image type the vision functions share (8-bit RGB, row-major, interleaved).
pub use ::image::RgbImage;
pub use boxes::scale_boxes;
pub use draw::{class_color, draw_boxes, DrawBox};
pub use image_processor::ImageProcessor;
pub use letterbox::{preprocess_val, Letterbox, RatioPad};
pub use rect::{rect_batch_shapes, rect_order};
pub use resize::resize_linear;

#[cfg(test)]
mod tests;
