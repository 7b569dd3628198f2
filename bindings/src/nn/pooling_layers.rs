//! Pooling and flattening as layers (`nn::max_pool2d`, `nn::avg_pool2d`,
//! `nn::adaptive_avg_pool2d`, `nn::flatten`).

use super::Model;
use crate::error::{runtime_error, RhaiResult};
use crate::help::Api;
use rhai::{Dynamic, Map};
use rusting_brain::nn::{AdaptiveAvgPool2d, AvgPool2d, Flatten, MaxPool2d, Window};

crate::options! {
    /// A pooling layer's window: the kernel is required, the stride defaults to it.
    struct WindowOptions {
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize) = (0, 0),
    }
}

/// A pooling layer's window from `#{ kernel, stride, padding }` (stride defaults to the kernel).
fn window(opts: Map, what: &str) -> RhaiResult<Window> {
    let o = WindowOptions::parse(what, opts)?;
    let kernel = o
        .kernel
        .ok_or_else(|| runtime_error(format!("{what}: needs a kernel (an int or [h, w])")))?;
    Ok(Window {
        kernel,
        stride: o.stride.unwrap_or(kernel),
        padding: o.padding,
    })
}

crate::options! {
    struct FlattenOptions {
        start_dim: usize = 1,
    }
}

fn flatten(opts: Map) -> RhaiResult<Model> {
    let start_dim = FlattenOptions::parse("nn::flatten", opts)?.start_dim;
    Ok(Model::new(Box::new(Flatten::new(start_dim))))
}

pub fn register(api: &mut Api) {
    api.func(
        "max_pool2d",
        "nn::max_pool2d(#{ kernel, stride, padding }) -> Model",
        "Max pooling as a layer (PyTorch's nn.MaxPool2d); sizes are ints or [h, w], the stride defaults to the kernel.",
        "let m = nn::sequential([nn::conv2d_layer(1, 4, 3, #{}), nn::max_pool2d(#{ kernel: 2 })]); print(m.forward(randn([1, 1, 8, 8])).shape);",
        |o: Map| window(o, "nn::max_pool2d").map(|w| Model::new(Box::new(MaxPool2d::new(w)))),
    );
    api.func(
        "avg_pool2d",
        "nn::avg_pool2d(#{ kernel, stride, padding }) -> Model",
        "Average pooling as a layer (nn.AvgPool2d; padding counts in the divisor).",
        "let pool = nn::avg_pool2d(#{ kernel: 2 }); print(pool.forward(randn([1, 2, 4, 4])).shape);",
        |o: Map| window(o, "nn::avg_pool2d").map(|w| Model::new(Box::new(AvgPool2d::new(w)))),
    );
    api.func(
        "adaptive_avg_pool2d",
        "nn::adaptive_avg_pool2d(size) -> Model",
        "Averages each feature map into size cells (an int or [h, w]) whatever the input's size, as nn.AdaptiveAvgPool2d; 1 gives one value per channel.",
        "let m = nn::sequential([nn::conv2d_layer(3, 8, 3, #{}), nn::adaptive_avg_pool2d(1), nn::flatten(), nn::linear(8, 2)]); print(m.forward(randn([2, 3, 9, 7])).shape);",
        |size: Dynamic| -> RhaiResult<Model> {
            let output = crate::options::pair(&size, "nn::adaptive_avg_pool2d size")?;
            Ok(Model::new(Box::new(AdaptiveAvgPool2d::new(output))))
        },
    );
    api.func(
        "flatten",
        "nn::flatten(#{ start_dim }) -> Model",
        "Joins the dimensions from start_dim (default 1) into one, as nn.Flatten: [N, C, H, W] becomes [N, C*H*W].",
        "let f = nn::flatten(#{ start_dim: 2 }); print(f.forward(zeros([2, 3, 4, 5])).shape);",
        flatten,
    );
    api.func(
        "flatten",
        "nn::flatten() -> Model",
        "The same from dim 1.",
        "print(nn::flatten().forward(zeros([2, 3, 4])).shape);",
        || flatten(Map::new()),
    );
}
