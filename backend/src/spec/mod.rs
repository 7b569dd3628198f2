//! The vocabulary the backends share: what each op family asks of a kernel (op kinds, shapes,
//! geometries, options), one file per family. The layers above (`ops`, `optim`) build these
//! and pass them down; nothing here knows about tensors, autograd or models, and the backends
//! import nothing from above `backend/`.

pub mod attention;
pub mod binary;
pub mod conv;
pub mod ggml;
pub mod loss;
pub mod nf4;
pub mod nms;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod real;
pub mod reduce;
pub mod unary;

pub use attention::AttentionSpec;
pub use binary::{BinaryOp, CmpOp};
pub use conv::Conv2dGeometry;
pub use loss::CrossEntropySpec;
pub use norm::{BatchNormSpec, NormAct, NormSpec};
pub use optim::UpdateRule;
pub use pool::PoolGeometry;
pub use real::Real;
pub use reduce::ReduceOp;
pub use unary::UnaryOp;
