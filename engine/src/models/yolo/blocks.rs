//! The CSP blocks of YOLOv8 and YOLO11, as ultralytics defines them: Bottleneck, C2f, C3k2
//! (a C2f whose inner blocks may be C3k), C3k, SPPF, and the position-sensitive attention of
//! C2PSA. Field names are ultralytics' attribute names, so parameter names match checkpoints.

use super::block::{indexed, indexed_mut, lower_child};
use super::conv::{ConvBn, ConvSpec};
use super::init::Init;
use crate::io::onnx::export::{Attr, GraphBuilder};
use crate::nn::Module;
use crate::{Result, Tensor};

/// `Bottleneck(c1, c2, shortcut, g, k, e)`: two convolutions, a residual when shapes allow.
pub struct Bottleneck {
    cv1: ConvBn,
    cv2: ConvBn,
    add: bool,
    training: bool,
}

impl Bottleneck {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        c1: usize,
        c2: usize,
        shortcut: bool,
        k: (usize, usize),
        e: f64,
        fused: bool,
        init: &mut Init<'_>,
    ) -> Result<Self> {
        let c_ = (c2 as f64 * e) as usize;
        Ok(Bottleneck {
            cv1: ConvBn::new(ConvSpec::new(c1, c_, k.0, 1), fused, init)?,
            cv2: ConvBn::new(ConvSpec::new(c_, c2, k.1, 1), fused, init)?,
            add: shortcut && c1 == c2,
            training: true,
        })
    }
}

impl Module for Bottleneck {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.cv2.forward(&self.cv1.forward(x)?)?;
        if self.add {
            x.add(&y)
        } else {
            Ok(y)
        }
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("cv1".into(), &self.cv1), ("cv2".into(), &self.cv2)]
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.cv1, &mut self.cv2]
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let y = lower_child(g, prefix, "cv1", &self.cv1, x)?;
        let y = lower_child(g, prefix, "cv2", &self.cv2, &y)?;
        Ok(match self.add {
            true => g.node("Add", &[x, &y], &[]),
            false => y,
        })
    }
    crate::nn::training_field!();
}

/// `C3(c1, c2, n, shortcut, g, e)` with kernel k in its bottlenecks: C3k when k is given.
pub struct C3 {
    cv1: ConvBn,
    cv2: ConvBn,
    cv3: ConvBn,
    m: Vec<Bottleneck>,
    training: bool,
}

impl C3 {
    pub fn c3k(
        c1: usize,
        c2: usize,
        n: usize,
        shortcut: bool,
        fused: bool,
        init: &mut Init<'_>,
    ) -> Result<Self> {
        let c_ = c2 / 2;
        Ok(C3 {
            cv1: ConvBn::new(ConvSpec::new(c1, c_, 1, 1), fused, init)?,
            cv2: ConvBn::new(ConvSpec::new(c1, c_, 1, 1), fused, init)?,
            cv3: ConvBn::new(ConvSpec::new(2 * c_, c2, 1, 1), fused, init)?,
            m: (0..n)
                .map(|_| Bottleneck::new(c_, c_, shortcut, (3, 3), 1.0, fused, init))
                .collect::<Result<_>>()?,
            training: true,
        })
    }
}

impl Module for C3 {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut a = self.cv1.forward(x)?;
        for b in &self.m {
            a = b.forward(&a)?;
        }
        self.cv3
            .forward(&Tensor::cat(&[a, self.cv2.forward(x)?], 1)?)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![
            ("cv1".into(), &self.cv1),
            ("cv2".into(), &self.cv2),
            ("cv3".into(), &self.cv3),
        ];
        c.extend(indexed("m", &self.m));
        c
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.cv1, &mut self.cv2, &mut self.cv3];
        c.extend(indexed_mut(&mut self.m));
        c
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let mut a = lower_child(g, prefix, "cv1", &self.cv1, x)?;
        for (i, b) in self.m.iter().enumerate() {
            a = lower_child(g, prefix, &format!("m.{i}"), b, &a)?;
        }
        let b = lower_child(g, prefix, "cv2", &self.cv2, x)?;
        let joined = g.concat(&[a, b], 1);
        lower_child(g, prefix, "cv3", &self.cv3, &joined)
    }
    crate::nn::training_field!();
}

/// C2f: split, a chain of inner blocks each fed the previous output, and a concat of all.
/// YOLOv8's C2f chains Bottlenecks; YOLO11's C3k2 chains Bottlenecks or C3k blocks.
pub struct C2f {
    c: usize,
    cv1: ConvBn,
    cv2: ConvBn,
    m: Vec<Box<dyn Module>>,
    training: bool,
}

/// What a C2f chains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum C2fInner {
    /// YOLOv8's C2f: Bottleneck with 3x3 kernels and e = 1.
    Bottleneck,
    /// C3k2 with c3k false: Bottleneck(c, c, shortcut) with its default e = 0.5.
    HalfBottleneck,
    /// C3k2 with c3k true: C3k(c, c, 2, shortcut).
    C3k,
}

impl C2f {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        c1: usize,
        c2: usize,
        n: usize,
        shortcut: bool,
        e: f64,
        inner: C2fInner,
        fused: bool,
        init: &mut Init<'_>,
    ) -> Result<Self> {
        let c = (c2 as f64 * e) as usize;
        let mut m: Vec<Box<dyn Module>> = Vec::with_capacity(n);
        for _ in 0..n {
            m.push(match inner {
                C2fInner::Bottleneck => {
                    Box::new(Bottleneck::new(c, c, shortcut, (3, 3), 1.0, fused, init)?)
                }
                C2fInner::HalfBottleneck => {
                    Box::new(Bottleneck::new(c, c, shortcut, (3, 3), 0.5, fused, init)?)
                }
                C2fInner::C3k => Box::new(C3::c3k(c, c, 2, shortcut, fused, init)?),
            });
        }
        Ok(C2f {
            c,
            cv1: ConvBn::new(ConvSpec::new(c1, 2 * c, 1, 1), fused, init)?,
            cv2: ConvBn::new(ConvSpec::new((2 + n) * c, c2, 1, 1), fused, init)?,
            m,
            training: true,
        })
    }
}

impl Module for C2f {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let a = self.cv1.forward(x)?;
        let mut ys = vec![a.narrow(1, 0, self.c)?, a.narrow(1, self.c, self.c)?];
        for b in &self.m {
            let next = b.forward(&ys[ys.len() - 1])?;
            ys.push(next);
        }
        self.cv2.forward(&Tensor::cat(&ys, 1)?)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> =
            vec![("cv1".into(), &self.cv1), ("cv2".into(), &self.cv2)];
        c.extend(
            self.m
                .iter()
                .enumerate()
                .map(|(i, b)| (format!("m.{i}"), b.as_ref())),
        );
        c
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.cv1, &mut self.cv2];
        c.extend(self.m.iter_mut().map(|b| b.as_mut() as &mut dyn Module));
        c
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let a = lower_child(g, prefix, "cv1", &self.cv1, x)?;
        let mut ys = vec![
            g.slice(&a, 1, 0, self.c)?,
            g.slice(&a, 1, self.c, 2 * self.c)?,
        ];
        for (i, b) in self.m.iter().enumerate() {
            let next = lower_child(g, prefix, &format!("m.{i}"), b.as_ref(), &ys[ys.len() - 1])?;
            ys.push(next);
        }
        let joined = g.concat(&ys, 1);
        lower_child(g, prefix, "cv2", &self.cv2, &joined)
    }
    crate::nn::training_field!();
}

/// SPPF: one 1x1 convolution, `n` chained k x k max pools (stride 1), a concat, a 1x1, and a
/// residual when asked and shapes allow.
pub struct Sppf {
    cv1: ConvBn,
    cv2: ConvBn,
    k: usize,
    n: usize,
    add: bool,
    training: bool,
}

/// How an SPPF is built. YOLOv8/YOLO11 rows (`[c2, k]`) activate the first convolution;
/// ultralytics' newer rows that also give `n` leave it linear.
#[derive(Clone, Copy, Debug)]
pub struct SppfSpec {
    pub c1: usize,
    pub c2: usize,
    pub k: usize,
    pub n: usize,
    pub shortcut: bool,
    pub cv1_act: bool,
}

impl Sppf {
    pub fn new(spec: SppfSpec, fused: bool, init: &mut Init<'_>) -> Result<Self> {
        let c_ = spec.c1 / 2;
        let cv1 = ConvSpec::new(spec.c1, c_, 1, 1);
        let cv1 = if spec.cv1_act { cv1 } else { cv1.linear() };
        Ok(Sppf {
            cv1: ConvBn::new(cv1, fused, init)?,
            cv2: ConvBn::new(ConvSpec::new(c_ * (spec.n + 1), spec.c2, 1, 1), fused, init)?,
            k: spec.k,
            n: spec.n,
            add: spec.shortcut && spec.c1 == spec.c2,
            training: true,
        })
    }
}

impl Module for Sppf {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut ys = vec![self.cv1.forward(x)?];
        for _ in 0..self.n {
            let p =
                ys[ys.len() - 1].max_pool2d((self.k, self.k), (1, 1), (self.k / 2, self.k / 2))?;
            ys.push(p);
        }
        let y = self.cv2.forward(&Tensor::cat(&ys, 1)?)?;
        if self.add {
            y.add(x)
        } else {
            Ok(y)
        }
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![("cv1".into(), &self.cv1), ("cv2".into(), &self.cv2)]
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.cv1, &mut self.cv2]
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let mut ys = vec![lower_child(g, prefix, "cv1", &self.cv1, x)?];
        let (k, p) = (self.k as i64, (self.k / 2) as i64);
        for _ in 0..self.n {
            let attrs = [
                ("kernel_shape", Attr::Ints(vec![k, k])),
                ("strides", Attr::Ints(vec![1, 1])),
                ("pads", Attr::Ints(vec![p, p, p, p])),
            ];
            let pooled = g.node("MaxPool", &[&ys[ys.len() - 1]], &attrs);
            ys.push(pooled);
        }
        let joined = g.concat(&ys, 1);
        let y = lower_child(g, prefix, "cv2", &self.cv2, &joined)?;
        Ok(match self.add {
            true => g.node("Add", &[&y, x], &[]),
            false => y,
        })
    }
    crate::nn::training_field!();
}

/// Multi-head self-attention over the pixels of a feature map, with a depth-wise 3x3
/// positional term on the values (ultralytics' `Attention`, attn_ratio 0.5).
pub struct Attention {
    num_heads: usize,
    head_dim: usize,
    key_dim: usize,
    qkv: ConvBn,
    proj: ConvBn,
    pe: ConvBn,
    training: bool,
}

impl Attention {
    pub fn new(dim: usize, num_heads: usize, fused: bool, init: &mut Init<'_>) -> Result<Self> {
        let head_dim = dim / num_heads;
        let key_dim = head_dim / 2;
        let h = dim + 2 * key_dim * num_heads;
        Ok(Attention {
            num_heads,
            head_dim,
            key_dim,
            qkv: ConvBn::new(ConvSpec::new(dim, h, 1, 1).linear(), fused, init)?,
            proj: ConvBn::new(ConvSpec::new(dim, dim, 1, 1).linear(), fused, init)?,
            pe: ConvBn::new(
                ConvSpec::new(dim, dim, 3, 1).groups(dim).linear(),
                fused,
                init,
            )?,
            training: true,
        })
    }
}

impl Module for Attention {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let s = x.shape().to_vec();
        let (b, n) = (s[0], s[2] * s[3]);
        let (kd, hd) = (self.key_dim, self.head_dim);
        let qkv = self
            .qkv
            .forward(x)?
            .reshape_to(&[b, self.num_heads, 2 * kd + hd, n])?;
        let q = qkv.narrow(2, 0, kd)?;
        let k = qkv.narrow(2, kd, kd)?;
        let v = qkv.narrow(2, 2 * kd, hd)?;
        let scale = (kd as f64).powf(-0.5);
        let attn = q
            .mul_scalar(scale)?
            .transpose(-2, -1)?
            .matmul(&k)?
            .softmax(-1)?;
        let out = v.matmul(&attn.transpose(-2, -1)?)?.reshape_to(&s)?;
        let pos = self.pe.forward(&v.contiguous()?.reshape_to(&s)?)?;
        self.proj.forward(&out.add(&pos)?)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        vec![
            ("qkv".into(), &self.qkv),
            ("proj".into(), &self.proj),
            ("pe".into(), &self.pe),
        ]
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        vec![&mut self.qkv, &mut self.proj, &mut self.pe]
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let (kd, hd, nh) = (self.key_dim, self.head_dim, self.num_heads);
        let qkv = lower_child(g, prefix, "qkv", &self.qkv, x)?;
        // [B, heads, 2·kd + hd, pixels]; the batch stays dynamic (0 copies it).
        let shape = g.ints("shape", &[0, nh as i64, (2 * kd + hd) as i64, -1])?;
        let qkv = g.node("Reshape", &[&qkv, &shape], &[]);
        let q = g.slice(&qkv, 2, 0, kd)?;
        let k = g.slice(&qkv, 2, kd, 2 * kd)?;
        let v = g.slice(&qkv, 2, 2 * kd, 2 * kd + hd)?;
        let scale = g.scalar("scale", (kd as f32).powf(-0.5))?;
        let q = g.node("Mul", &[&q, &scale], &[]);
        let qt = g.node(
            "Transpose",
            &[&q],
            &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
        );
        let scores = g.node("MatMul", &[&qt, &k], &[]);
        let attn = g.node("Softmax", &[&scores], &[("axis", Attr::Int(-1))]);
        let attn_t = g.node(
            "Transpose",
            &[&attn],
            &[("perm", Attr::Ints(vec![0, 1, 3, 2]))],
        );
        let out = g.node("MatMul", &[&v, &attn_t], &[]);
        let image = g.node("Shape", &[x], &[]);
        let out = g.node("Reshape", &[&out, &image], &[]);
        let v_image = g.node("Reshape", &[&v, &image], &[]);
        let pos = lower_child(g, prefix, "pe", &self.pe, &v_image)?;
        let sum = g.node("Add", &[&out, &pos], &[]);
        lower_child(g, prefix, "proj", &self.proj, &sum)
    }
    crate::nn::training_field!();
}

/// Attention then a two-layer 1x1 feed-forward, each with a residual.
pub struct PsaBlock {
    attn: Attention,
    ffn: [ConvBn; 2],
    training: bool,
}

impl PsaBlock {
    pub fn new(c: usize, num_heads: usize, fused: bool, init: &mut Init<'_>) -> Result<Self> {
        Ok(PsaBlock {
            attn: Attention::new(c, num_heads, fused, init)?,
            ffn: [
                ConvBn::new(ConvSpec::new(c, 2 * c, 1, 1), fused, init)?,
                ConvBn::new(ConvSpec::new(2 * c, c, 1, 1).linear(), fused, init)?,
            ],
            training: true,
        })
    }
}

impl Module for PsaBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.add(&self.attn.forward(x)?)?;
        let f = self.ffn[1].forward(&self.ffn[0].forward(&x)?)?;
        x.add(&f)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> = vec![("attn".into(), &self.attn)];
        c.extend(indexed("ffn", &self.ffn));
        c
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.attn];
        c.extend(indexed_mut(&mut self.ffn));
        c
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let a = lower_child(g, prefix, "attn", &self.attn, x)?;
        let x = g.node("Add", &[x, &a], &[]);
        let f = lower_child(g, prefix, "ffn.0", &self.ffn[0], &x)?;
        let f = lower_child(g, prefix, "ffn.1", &self.ffn[1], &f)?;
        Ok(g.node("Add", &[&x, &f], &[]))
    }
    crate::nn::training_field!();
}

/// C2PSA: split in two, attention blocks on one half, concat, 1x1.
pub struct C2Psa {
    c: usize,
    cv1: ConvBn,
    cv2: ConvBn,
    m: Vec<PsaBlock>,
    training: bool,
}

impl C2Psa {
    pub fn new(c1: usize, n: usize, fused: bool, init: &mut Init<'_>) -> Result<Self> {
        let c = c1 / 2;
        Ok(C2Psa {
            c,
            cv1: ConvBn::new(ConvSpec::new(c1, 2 * c, 1, 1), fused, init)?,
            cv2: ConvBn::new(ConvSpec::new(2 * c, c1, 1, 1), fused, init)?,
            m: (0..n)
                .map(|_| PsaBlock::new(c, (c / 64).max(1), fused, init))
                .collect::<Result<_>>()?,
            training: true,
        })
    }
}

impl Module for C2Psa {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.cv1.forward(x)?;
        let a = y.narrow(1, 0, self.c)?;
        let mut b = y.narrow(1, self.c, self.c)?.contiguous()?;
        for m in &self.m {
            b = m.forward(&b)?;
        }
        self.cv2.forward(&Tensor::cat(&[a, b], 1)?)
    }
    fn children(&self) -> Vec<(String, &dyn Module)> {
        let mut c: Vec<(String, &dyn Module)> =
            vec![("cv1".into(), &self.cv1), ("cv2".into(), &self.cv2)];
        c.extend(indexed("m", &self.m));
        c
    }
    fn children_mut(&mut self) -> Vec<&mut dyn Module> {
        let mut c: Vec<&mut dyn Module> = vec![&mut self.cv1, &mut self.cv2];
        c.extend(indexed_mut(&mut self.m));
        c
    }
    fn to_onnx(&self, g: &mut GraphBuilder, prefix: &str, x: &str) -> Result<String> {
        let y = lower_child(g, prefix, "cv1", &self.cv1, x)?;
        let a = g.slice(&y, 1, 0, self.c)?;
        let mut b = g.slice(&y, 1, self.c, 2 * self.c)?;
        for (i, m) in self.m.iter().enumerate() {
            b = lower_child(g, prefix, &format!("m.{i}"), m, &b)?;
        }
        let joined = g.concat(&[a, b], 1);
        lower_child(g, prefix, "cv2", &self.cv2, &joined)
    }
    crate::nn::training_field!();
}
