//! Tests of decoding, the OpenCV-exact resize (against fixtures from real cv2), the letterbox
//! and rect-batch geometry (against numbers worked out from ultralytics' formulas).

use super::boxes::scale_boxes;
use super::letterbox::{load_size, preprocess_val, Letterbox, PAD_VALUE};
use super::{image as img, rect_batch_shapes, rect_order, resize::resize_linear_raw};
use crate::data::npy::read_npy;
use crate::{DType, Error, Tensor};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/yolo")
        .join(name)
}

fn npy_u8(name: &str) -> (Vec<u8>, Vec<usize>) {
    let t = read_npy(fixture(name)).unwrap();
    assert_eq!(t.dtype(), DType::U8, "{name}");
    (t.to_vec::<u8>().unwrap(), t.dims().to_vec())
}

#[test]
fn resize_matches_cv2_bit_for_bit() {
    let (src, dims) = npy_u8("src_37x53.npy");
    assert_eq!(dims, [37, 53, 3]);
    for (w, h) in [
        (80, 56),
        (20, 14),
        (31, 22),
        (106, 74),
        (7, 5),
        (160, 37),
        (26, 18),
    ] {
        let (want, _) = npy_u8(&format!("resize_{w}x{h}.npy"));
        let got = resize_linear_raw(&src, 53, 37, 3, w, h);
        let differing = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(differing, 0, "{w}x{h}: {differing} bytes differ from cv2");
    }
}

#[test]
fn exif_orientation_6_is_applied_like_cv2_imread() {
    let t = img::read_image(fixture("exif6.jpg")).unwrap();
    let (want, dims) = npy_u8("exif6_cv2.npy");
    assert_eq!(
        t.dims(),
        &dims[..],
        "the stored 12x6 image is displayed 6x12"
    );
    let got = t.to_vec::<u8>().unwrap();
    let max = got
        .iter()
        .zip(&want)
        .map(|(a, b)| a.abs_diff(*b))
        .max()
        .unwrap();
    assert!(max <= 3, "max |diff| {max} against cv2's decode");
    assert_eq!(img::image_size(fixture("exif6.jpg")).unwrap(), (6, 12));
}

#[test]
fn corrupt_image_error_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.jpg");
    std::fs::write(&path, b"\xFF\xD8\xFF\xE0 not really a jpeg").unwrap();
    let err = img::read_image(&path).unwrap_err().to_string();
    assert!(err.contains("broken.jpg"), "{err}");
    std::fs::write(&path, b"").unwrap();
    let err = img::read_image(&path).unwrap_err().to_string();
    assert!(err.contains("broken.jpg") && err.contains("empty"), "{err}");
}

#[test]
fn save_then_read_png_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..5 * 4 * 3).map(|i| (i * 7) as u8).collect();
    let t = Tensor::from_vec(data.clone(), &[4, 5, 3]).unwrap();
    img::save_image(&t, dir.path().join("a.png")).unwrap();
    let back = img::read_image(dir.path().join("a.png")).unwrap();
    assert_eq!(back.dims(), &[4, 5, 3]);
    assert_eq!(back.to_vec::<u8>().unwrap(), data);
}

#[test]
fn save_rejects_unknown_extension_and_wrong_shape() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tensor::zeros(&[4, 5, 3], DType::U8, crate::Device::Cpu).unwrap();
    assert!(img::save_image(&t, dir.path().join("a.bmp")).is_err());
    let f = Tensor::zeros(&[4, 5, 3], DType::F32, crate::Device::Cpu).unwrap();
    assert!(matches!(
        img::save_image(&f, dir.path().join("a.png")),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn load_size_resizes_the_long_side_with_ceil() {
    assert_eq!(load_size(810, 1080, 640), (480, 640));
    assert_eq!(load_size(1280, 720, 640), (640, 360));
    // 500 * 1.28 = 640, 333 * 1.28 = 426.24, ceil 427
    assert_eq!(load_size(500, 333, 640), (640, 427));
    // 315 * (640 / 525) is 384.00000000000006 in f64: ultralytics' ceil gives 385
    assert_eq!(load_size(315, 525, 640), (385, 640));
    // small images are scaled up; the long side already at imgsz is left alone
    assert_eq!(load_size(100, 50, 640), (640, 320));
    assert_eq!(load_size(640, 77, 640), (640, 77));
}

#[test]
fn letterbox_splits_padding_as_ultralytics() {
    let lb = Letterbox::new((640, 480), (640, 640), false);
    assert_eq!(
        (lb.unpadded, lb.left, lb.right, lb.top, lb.bottom),
        ((480, 640), 80, 80, 0, 0)
    );
    // 213 rows of padding: round(106.5 - 0.1) = 106 above, round(106.5 + 0.1) = 107 below
    let lb = Letterbox::new((427, 640), (640, 640), false);
    assert_eq!((lb.top, lb.bottom, lb.left, lb.right), (106, 107, 0, 0));
}

#[test]
fn letterbox_rounds_half_to_even_and_never_scales_up() {
    // ratio 0.5: width 5 -> 2.5 rounds to 2 (Python's round), height 20 -> 10
    let lb = Letterbox::new((20, 5), (10, 10), false);
    assert_eq!(lb.unpadded, (2, 10));
    assert_eq!((lb.left, lb.right), (4, 4));
    let lb = Letterbox::new((100, 50), (640, 640), false);
    assert_eq!((lb.ratio, lb.unpadded), (1.0, (50, 100)));
    let lb = Letterbox::new((100, 50), (640, 640), true);
    assert_eq!(lb.unpadded, (320, 640));
}

#[test]
fn preprocess_pads_with_grey_and_maps_boxes_back() {
    let src = image::RgbImage::from_pixel(200, 100, image::Rgb([10, 20, 30]));
    let (out, rp) = preprocess_val(&src, 64, None);
    assert_eq!(out.dimensions(), (64, 64));
    // 200x100 -> 64x32, 32 rows of padding: 16 above, 16 below
    assert_eq!((rp.pad_xy, rp.gain_hw), ((0.0, 16.0), (0.32, 0.32)));
    assert_eq!(out.get_pixel(0, 15).0, [PAD_VALUE; 3]);
    assert_eq!(out.get_pixel(0, 16).0, [10, 20, 30]);
    assert_eq!(out.get_pixel(63, 48).0, [PAD_VALUE; 3]);
    let mut boxes = [[0.0f32, 16.0, 64.0, 48.0], [-5.0, 0.0, 70.0, 60.0]];
    scale_boxes(&mut boxes, &rp);
    assert_eq!(boxes[0], [0.0, 0.0, 200.0, 100.0]);
    assert_eq!(
        boxes[1],
        [0.0, 0.0, 200.0, 100.0],
        "clipped to the original"
    );
}

#[test]
fn rect_batch_shapes_follow_the_formula() {
    // ceil(s * 640 / 32 + 0.5) * 32: 0.75 -> 512, 1 -> 672, 0.5625 -> 384
    let wide = [(640, 480), (640, 360)];
    assert_eq!(rect_batch_shapes(&wide, 2, 640, 32, 0.5), [(512, 672)]);
    let tall = [(810, 1080), (480, 640)];
    assert_eq!(rect_batch_shapes(&tall, 2, 640, 32, 0.5), [(672, 512)]);
    let mixed = [(640, 480), (480, 640)];
    assert_eq!(rect_batch_shapes(&mixed, 2, 640, 32, 0.5), [(672, 672)]);
    let three = [(1280, 720), (640, 480), (480, 640)];
    assert_eq!(
        rect_batch_shapes(&three, 2, 640, 32, 0.5),
        [(512, 672), (672, 512)]
    );
}

#[test]
fn rect_order_sorts_by_aspect_ratio_stably() {
    let sizes = [(100, 200), (200, 100), (100, 100), (300, 100), (50, 50)];
    assert_eq!(rect_order(&sizes), [3, 1, 2, 4, 0]);
}

// ----- drawing -----

fn grey(w: usize, h: usize) -> Tensor {
    Tensor::from_vec(vec![40u8; w * h * 3], &[h, w, 3]).unwrap()
}

fn pixel(t: &Tensor, x: usize, y: usize) -> [u8; 3] {
    let w = t.dims()[1];
    let v = t.to_vec::<u8>().unwrap();
    let i = (y * w + x) * 3;
    [v[i], v[i + 1], v[i + 2]]
}

#[test]
fn draw_boxes_outlines_the_box_and_leaves_the_inside() {
    let color = super::class_color(0);
    let boxes = [super::DrawBox {
        xyxy: [50.0, 60.0, 150.0, 140.0],
        label: String::new(),
        color,
    }];
    let out = super::draw_boxes(&grey(200, 200), &boxes).unwrap();
    // line width max(round((200 + 200 + 3) / 2 * 0.003), 2) = 2
    assert_eq!(pixel(&out, 100, 60), color);
    assert_eq!(pixel(&out, 100, 61), color);
    assert_eq!(pixel(&out, 100, 62), [40; 3]);
    assert_eq!(pixel(&out, 50, 100), color);
    assert_eq!(pixel(&out, 149, 100), color);
    assert_eq!(pixel(&out, 100, 100), [40; 3]);
    assert_eq!(pixel(&out, 100, 30), [40; 3], "no label, no tab");
}

#[test]
fn draw_boxes_puts_a_label_tab_with_text_above_the_box() {
    let color = [0x04, 0x2A, 0xFF];
    let boxes = [super::DrawBox {
        xyxy: [20.0, 60.0, 150.0, 140.0],
        label: "bus 0.87".into(),
        color,
    }];
    let out = super::draw_boxes(&grey(200, 200), &boxes).unwrap();
    let (mut tab, mut ink) = (0, 0);
    for y in 30..60 {
        for x in 20..150 {
            match pixel(&out, x, y) {
                p if p == color => tab += 1,
                [40, 40, 40] => {}
                _ => ink += 1,
            }
        }
    }
    assert!(tab > 500, "tab pixels {tab}");
    assert!(ink > 50, "text pixels {ink}");
}

#[test]
fn draw_boxes_clips_boxes_outside_the_image() {
    let boxes = [
        super::DrawBox {
            xyxy: [-50.0, -20.0, 500.0, 30.0],
            label: "x".into(),
            color: [255, 0, 0],
        },
        super::DrawBox {
            xyxy: [f32::NAN, 0.0, 1.0, 1.0],
            label: "nan".into(),
            color: [0, 255, 0],
        },
    ];
    let out = super::draw_boxes(&grey(64, 48), &boxes).unwrap();
    assert_eq!(out.dims(), &[48, 64, 3]);
    assert!(super::draw_boxes(
        &Tensor::zeros(&[4, 4], DType::U8, crate::Device::Cpu).unwrap(),
        &boxes
    )
    .is_err());
}
