//! Prediction on one image as ultralytics' predictor does it: letterbox to the smallest
//! stride-multiple canvas around `imgsz` (`auto=True`), the model, NMS (conf 0.25, IoU 0.7,
//! best class per box), and boxes mapped back onto the original image.

use super::network::YoloModel;
use crate::vision::nms::{non_max_suppression, NmsOptions};
use crate::vision::{scale_boxes, Letterbox, RatioPad, RgbImage};
use crate::{no_grad, DType, Device, Error, Result, Tensor};

#[derive(Clone, Debug)]
pub struct PredictOptions {
    pub conf: f64,
    pub iou: f64,
    pub imgsz: usize,
    pub max_det: usize,
    pub half: bool,
}

impl Default for PredictOptions {
    fn default() -> Self {
        PredictOptions {
            conf: 0.25,
            iou: 0.7,
            imgsz: 640,
            max_det: 300,
            half: false,
        }
    }
}

/// One detected object, in pixels of the original image.
#[derive(Clone, Debug, PartialEq)]
pub struct Detection {
    pub xyxy: [f32; 4],
    pub class: usize,
    pub name: String,
    pub confidence: f32,
}

/// The letterbox of the predictor: scale the long side to `imgsz` (up or down), then pad only
/// up to the next multiple of `stride` on each axis.
pub fn predict_letterbox(img: &RgbImage, imgsz: usize, stride: usize) -> (RgbImage, RatioPad) {
    let (w0, h0) = (img.width() as usize, img.height() as usize);
    let r = (imgsz as f64 / h0 as f64).min(imgsz as f64 / w0 as f64);
    let side = |s: usize| ((s as f64 * r).round_ties_even() as usize).max(1);
    let (nw, nh) = (side(w0), side(h0));
    let canvas = (
        nh + imgsz.saturating_sub(nh) % stride,
        nw + imgsz.saturating_sub(nw) % stride,
    );
    let lb = Letterbox::new((h0, w0), canvas, true);
    let out = lb.apply(img);
    let (uw, uh) = lb.unpadded;
    let rp = RatioPad {
        gain_hw: (uh as f64 / h0 as f64, uw as f64 / w0 as f64),
        pad_xy: (lb.left as f64, lb.top as f64),
        orig_hw: (h0, w0),
    };
    (out, rp)
}

impl YoloModel {
    /// Detects objects in `img`, running the model on `device` (where the model lives).
    pub fn predict(
        &self,
        img: &RgbImage,
        opts: &PredictOptions,
        device: Device,
    ) -> Result<Vec<Detection>> {
        if opts.imgsz == 0 {
            return Err(Error::invalid("yolo predict", "imgsz must be positive"));
        }
        let stride = self.max_stride();
        let imgsz = opts.imgsz.div_ceil(stride) * stride;
        let (canvas, rp) = predict_letterbox(img, imgsz, stride);
        let (w, h) = (canvas.width() as usize, canvas.height() as usize);
        let dtype = if opts.half { DType::F16 } else { DType::F32 };
        let x = Tensor::from_vec(canvas.into_raw(), &[1, h, w, 3])?
            .permute(&[0, 3, 1, 2])?
            .to(device, dtype)?
            .div_scalar(255.0)?;
        let pred = no_grad(|| {
            if opts.half {
                crate::amp::autocast(Some(DType::F16), || self.forward(&x))
            } else {
                self.forward(&x)
            }
        })?;
        let nms = NmsOptions {
            conf_thres: opts.conf,
            iou_thres: opts.iou,
            max_det: opts.max_det,
            ..NmsOptions::prediction()
        };
        let det = non_max_suppression(&pred, &nms)?.remove(0);
        let mut boxes = det.boxes.clone();
        scale_boxes(&mut boxes, &rp);
        Ok(boxes
            .into_iter()
            .zip(det.classes)
            .zip(det.scores)
            .map(|((xyxy, class), confidence)| Detection {
                xyxy,
                class,
                name: self
                    .names
                    .get(class)
                    .cloned()
                    .unwrap_or_else(|| class.to_string()),
                confidence,
            })
            .collect())
    }
}
