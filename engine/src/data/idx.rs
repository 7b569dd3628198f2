//! IDX files, the format of MNIST and Fashion-MNIST.
//!
//! Layout: two zero bytes, a type byte (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32, 0x0D f32,
//! 0x0E f64), a byte with the number of dimensions, one big-endian u32 per dimension, then the
//! elements, big-endian, in row-major order. The dimensions must account for exactly the bytes
//! that follow before anything is decoded.

use super::in_file;
use super::untrusted::{checked_numel, decode, Cursor};
use super::Dataset;
use crate::{DType, Error, Result, Tensor};
use std::path::Path;

impl Dataset {
    /// Images `[N, rows, cols]` flattened to `[N, rows * cols]` f32 and labels `[N]` as class
    /// ids. u8 pixels are scaled to [0, 1] by dividing by 255, the usual input range for MNIST.
    pub fn from_idx(images: impl AsRef<Path>, labels: impl AsRef<Path>) -> Result<Dataset> {
        let labels_path = labels.as_ref();
        let images = read_idx(images)?;
        let labels = read_idx(labels_path)?;
        if labels.dtype().is_float() {
            return Err(in_file(
                labels_path,
                Error::format(
                    "idx",
                    format!(
                        "labels must be integers, the label file holds {}",
                        labels.dtype()
                    ),
                ),
            ));
        }
        let pixels = if images.dtype() == DType::U8 {
            images.to_dtype(DType::F32)?.div_scalar(255.0)?
        } else {
            images
        };
        Dataset::flattened(pixels, labels)
    }
}

/// Reads an IDX file; a format error names the file.
pub fn read_idx(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_idx(&bytes).map_err(|e| in_file(path, e))
}

/// Parses the bytes of an IDX file. u8 stays u8, f32 and f64 keep their dtype, and the signed
/// integer types widen to i64, the engine's integer dtype.
pub fn parse_idx(bytes: &[u8]) -> Result<Tensor> {
    let mut c = Cursor::new("idx", bytes);
    let [z0, z1, type_code, ndims] = c.array::<4>("magic number")?;
    if (z0, z1) != (0, 0) {
        return Err(Error::format(
            "idx",
            format!("the magic number must start with two zero bytes, found {z0:#04x} {z1:#04x}"),
        ));
    }
    let elem_size = match type_code {
        0x08 | 0x09 => 1,
        0x0B => 2,
        0x0C | 0x0D => 4,
        0x0E => 8,
        t => {
            return Err(Error::format(
                "idx",
                format!(
                    "unknown element type {t:#04x} (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)"
                ),
            ))
        }
    };
    // At most 255 dimensions, each read (and bounds-checked) before it is stored.
    let mut shape = Vec::new();
    for _ in 0..ndims {
        let d = u32::from_be_bytes(c.array("dimension sizes")?);
        shape.push(d as usize);
    }
    let numel = checked_numel("idx", &shape)?;
    let data = c.payload(numel, elem_size)?;
    match type_code {
        0x08 => Tensor::from_vec(data.to_vec(), &shape),
        0x09 => Tensor::from_vec(
            data.iter().map(|&b| b as i8 as i64).collect::<Vec<_>>(),
            &shape,
        ),
        0x0B => Tensor::from_vec(widen(decode::<2, i16>(data, i16::from_be_bytes)), &shape),
        0x0C => Tensor::from_vec(widen(decode::<4, i32>(data, i32::from_be_bytes)), &shape),
        0x0D => Tensor::from_vec(decode::<4, f32>(data, f32::from_be_bytes), &shape),
        _ => Tensor::from_vec(decode::<8, f64>(data, f64::from_be_bytes), &shape),
    }
}

fn widen<T: Into<i64>>(v: Vec<T>) -> Vec<i64> {
    v.into_iter().map(Into::into).collect()
}

/// The bytes of an IDX file for a u8, f32 or f64 tensor (the types MNIST-style tools write).
pub fn idx_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let code = match t.dtype() {
        DType::U8 => 0x08,
        DType::F32 => 0x0D,
        DType::F64 => 0x0E,
        dtype => {
            return Err(Error::UnsupportedDType {
                op: "idx",
                dtype,
                detail: ": IDX writing supports u8, f32 and f64".into(),
            })
        }
    };
    let rank = u8::try_from(t.rank())
        .map_err(|_| Error::invalid("idx", "IDX holds at most 255 dimensions"))?;
    let mut out = vec![0, 0, code, rank];
    for &d in t.shape() {
        let d = u32::try_from(d)
            .map_err(|_| Error::invalid("idx", format!("dimension {d} does not fit in u32")))?;
        out.extend_from_slice(&d.to_be_bytes());
    }
    match t.dtype() {
        DType::U8 => out.extend(t.to_vec::<u8>()?),
        DType::F32 => out.extend(t.to_vec::<f32>()?.into_iter().flat_map(f32::to_be_bytes)),
        _ => out.extend(t.to_vec::<f64>()?.into_iter().flat_map(f64::to_be_bytes)),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(code: u8, dims: &[u32]) -> Vec<u8> {
        let mut b = vec![0, 0, code, dims.len() as u8];
        for d in dims {
            b.extend_from_slice(&d.to_be_bytes());
        }
        b
    }

    #[test]
    fn reads_mnist_style_u8_images() {
        let mut b = header(0x08, &[2, 2, 3]);
        b.extend(0..12u8);
        let t = parse_idx(&b).unwrap();
        assert_eq!((t.shape(), t.dtype()), (&[2usize, 2, 3][..], DType::U8));
        assert_eq!(t.to_vec::<u8>().unwrap(), (0..12).collect::<Vec<u8>>());
    }

    #[test]
    fn big_endian_elements_decode_for_every_type() {
        let mut i8s = header(0x09, &[2]);
        i8s.extend([0xFF, 0x05]);
        assert_eq!(parse_idx(&i8s).unwrap().to_vec::<i64>().unwrap(), [-1, 5]);
        let mut i16s = header(0x0B, &[1]);
        i16s.extend((-300i16).to_be_bytes());
        assert_eq!(parse_idx(&i16s).unwrap().to_vec::<i64>().unwrap(), [-300]);
        let mut i32s = header(0x0C, &[1]);
        i32s.extend(70_000i32.to_be_bytes());
        assert_eq!(parse_idx(&i32s).unwrap().to_vec::<i64>().unwrap(), [70_000]);
        let mut f32s = header(0x0D, &[1]);
        f32s.extend(1.5f32.to_be_bytes());
        assert_eq!(parse_idx(&f32s).unwrap().to_vec::<f32>().unwrap(), [1.5]);
        let mut f64s = header(0x0E, &[1]);
        f64s.extend((-0.25f64).to_be_bytes());
        assert_eq!(parse_idx(&f64s).unwrap().to_vec::<f64>().unwrap(), [-0.25]);
    }

    #[test]
    fn written_files_read_back() {
        for t in [
            Tensor::from_vec(vec![1u8, 2, 3, 4], &[2, 2]).unwrap(),
            Tensor::from_vec(vec![1.5f32, -2.0], &[2]).unwrap(),
            Tensor::from_vec(vec![0.1f64], &[1, 1]).unwrap(),
        ] {
            let back = parse_idx(&idx_bytes(&t).unwrap()).unwrap();
            assert_eq!((back.shape(), back.dtype()), (t.shape(), t.dtype()));
            assert_eq!(back.to_vec_f64().unwrap(), t.to_vec_f64().unwrap());
        }
    }

    #[test]
    fn huge_dimensions_are_refused_before_allocating() {
        let mut b = header(0x08, &[0xFFFF_FFFF, 0xFFFF_FFFF, 0xFFFF_FFFF]);
        b.extend([1, 2, 3]);
        let err = parse_idx(&b).unwrap_err().to_string();
        assert!(err.contains("idx"), "{err}");
        let mut zero_but_huge = header(0x0E, &[0, 0xFFFF_FFFF, 0xFFFF_FFFF, 0xFFFF_FFFF]);
        zero_but_huge.extend([0u8; 0]);
        assert!(parse_idx(&zero_but_huge).is_err());
    }

    #[test]
    fn size_mismatches_and_bad_magic_are_format_errors() {
        let mut short = header(0x0D, &[3]);
        short.extend([0u8; 8]);
        let mut long = header(0x08, &[3]);
        long.extend([0u8; 4]);
        let truncated_dims = vec![0, 0, 0x08, 3, 0, 0, 0, 1];
        for bytes in [
            short,
            long,
            truncated_dims,
            vec![1, 0, 0x08, 1, 0, 0, 0, 0],
            vec![0, 0, 0x07, 1, 0, 0, 0, 0],
            vec![0, 0],
        ] {
            match parse_idx(&bytes) {
                Err(Error::Format { format: "idx", .. }) => {}
                other => panic!("{bytes:?}: expected an idx format error, got {other:?}"),
            }
        }
    }

    #[test]
    fn from_idx_flattens_and_scales_u8_images() {
        let dir = std::env::temp_dir();
        let (fx, fy) = (
            dir.join(format!("rb_idx_x_{}.idx", std::process::id())),
            dir.join(format!("rb_idx_y_{}.idx", std::process::id())),
        );
        let mut images = header(0x08, &[2, 1, 2]);
        images.extend([0, 255, 51, 102]);
        let mut labels = header(0x08, &[2]);
        labels.extend([7, 3]);
        std::fs::write(&fx, images).unwrap();
        std::fs::write(&fy, labels).unwrap();
        let d = Dataset::from_idx(&fx, &fy);
        std::fs::remove_file(&fx).unwrap();
        std::fs::remove_file(&fy).unwrap();
        let d = d.unwrap();
        assert_eq!(d.features().shape(), &[2, 2]);
        assert_eq!(d.features().to_vec::<f32>().unwrap(), [0.0, 1.0, 0.2, 0.4]);
        assert_eq!(d.targets().to_vec::<i64>().unwrap(), [7, 3]);
    }

    #[test]
    fn a_format_error_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("labels.idx");
        let mut truncated = header(0x08, &[5]);
        truncated.extend([1, 2]);
        std::fs::write(&path, truncated).unwrap();
        let msg = read_idx(&path).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("idx: {}: ", path.display())),
            "{msg}"
        );
    }
}
