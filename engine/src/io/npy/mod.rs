//! NumPy `.npy` files (format versions 1, 2 and 3), read into tensors and written from them.
//!
//! Layout: the magic `\x93NUMPY`, a version, a little-endian header length (u16 in v1, u32
//! after), then a Python dict literal such as `{'descr': '<f4', 'fortran_order': False,
//! 'shape': (3, 4), }` padded with spaces to a 64-byte boundary, then the raw elements. The
//! header is parsed by hand rather than evaluated, and its shape and dtype must account for
//! exactly the bytes that follow before anything is decoded.

use super::in_file;
use super::untrusted::{checked_numel, decode, Cursor};
use crate::{DType, Device, Error, Result, Tensor};
use half::f16;
use std::path::Path;

mod header;

use header::Header;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads an `.npy` file; a format error names the file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    parse_npy(&bytes).map_err(|e| in_file(path, e))
}

/// Parses the bytes of a `.npy` file. NumPy types without a tensor dtype of their own widen
/// losslessly: int8/16/32 to i64, uint16 to u32, uint64 to i64 (values above i64::MAX are an
/// error).
pub fn parse_npy(bytes: &[u8]) -> Result<Tensor> {
    let mut c = Cursor::new("npy", bytes);
    if c.take(MAGIC.len(), "magic")? != MAGIC {
        return Err(Error::format(
            "npy",
            "not an .npy file: the magic \\x93NUMPY is missing",
        ));
    }
    let [major, _minor] = c.array::<2>("version")?;
    let header_len = match major {
        1 => u16::from_le_bytes(c.array("header length")?) as usize,
        2 | 3 => u32::from_le_bytes(c.array("header length")?) as usize,
        v => {
            return Err(Error::format(
                "npy",
                format!("unsupported format version {v}"),
            ))
        }
    };
    let header = std::str::from_utf8(c.take(header_len, "header")?)
        .map_err(|_| Error::format("npy", "the header is not valid text"))?;
    let header = Header::parse(header)?;
    let numel = checked_numel("npy", &header.shape)?;
    let data = c.payload(numel, header.elem.size)?;
    if header.fortran_order && header.shape.len() > 1 {
        // Column-major data is the row-major layout of the reversed shape; permuting the
        // dimensions back and copying gives the row-major tensor.
        let reversed: Vec<usize> = header.shape.iter().rev().copied().collect();
        let dims: Vec<isize> = (0..header.shape.len() as isize).rev().collect();
        return header
            .elem
            .decode(data, &reversed)?
            .permute(&dims)?
            .contiguous();
    }
    header.elem.decode(data, &header.shape)
}

/// One element type: the tensor dtype it reads as, and how it sits on disk.
#[derive(Clone, Copy, Debug)]
struct Elem {
    kind: u8,
    size: usize,
    big_endian: bool,
}

impl Elem {
    fn parse(descr: &str) -> Result<Elem> {
        let unsupported = || {
            Error::format(
                "npy",
                format!(
                    "dtype {descr:?} is not supported (expected bool, (u)int8-64 or float16/32/64)"
                ),
            )
        };
        let b = descr.as_bytes();
        let (&order, rest) = b.split_first().ok_or_else(unsupported)?;
        let (&kind, digits) = rest.split_first().ok_or_else(unsupported)?;
        let size: usize = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or_else(unsupported)?;
        let ok = matches!(
            (kind, size),
            (b'f', 2 | 4 | 8) | (b'i', 1 | 2 | 4 | 8) | (b'u', 1 | 2 | 4 | 8) | (b'b', 1)
        );
        let big_endian = match order {
            b'<' | b'|' => false,
            b'>' => true,
            b'=' => cfg!(target_endian = "big"),
            _ => return Err(unsupported()),
        };
        if !ok || (order == b'|' && size != 1) {
            return Err(unsupported());
        }
        Ok(Elem {
            kind,
            size,
            big_endian,
        })
    }

    fn decode(self, data: &[u8], shape: &[usize]) -> Result<Tensor> {
        macro_rules! read {
            ($t:ty, $n:literal) => {
                decode::<$n, $t>(
                    data,
                    if self.big_endian {
                        <$t>::from_be_bytes
                    } else {
                        <$t>::from_le_bytes
                    },
                )
            };
        }
        match (self.kind, self.size) {
            (b'f', 2) => {
                let bits = read!(u16, 2);
                Tensor::from_vec(
                    bits.into_iter().map(f16::from_bits).collect::<Vec<_>>(),
                    shape,
                )
            }
            (b'f', 4) => Tensor::from_vec(read!(f32, 4), shape),
            (b'f', 8) => Tensor::from_vec(read!(f64, 8), shape),
            (b'i', 1) => Tensor::from_vec(
                data.iter().map(|&b| b as i8 as i64).collect::<Vec<_>>(),
                shape,
            ),
            (b'i', 2) => Tensor::from_vec(widen(read!(i16, 2)), shape),
            (b'i', 4) => Tensor::from_vec(widen(read!(i32, 4)), shape),
            (b'i', 8) => Tensor::from_vec(read!(i64, 8), shape),
            (b'u', 1) => Tensor::from_vec(data.to_vec(), shape),
            (b'u', 2) => Tensor::from_vec(
                read!(u16, 2).into_iter().map(u32::from).collect::<Vec<_>>(),
                shape,
            ),
            (b'u', 4) => Tensor::from_vec(read!(u32, 4), shape),
            (b'u', 8) => {
                let v = read!(u64, 8)
                    .into_iter()
                    .map(|x| {
                        i64::try_from(x).map_err(|_| {
                            Error::format(
                                "npy",
                                format!("uint64 value {x} does not fit the i64 dtype"),
                            )
                        })
                    })
                    .collect::<Result<Vec<i64>>>()?;
                Tensor::from_vec(v, shape)
            }
            (b'b', 1) => {
                let v = data
                    .iter()
                    .map(|&b| match b {
                        0 | 1 => Ok(b == 1),
                        _ => Err(Error::format(
                            "npy",
                            format!("bool byte {b} is neither 0 nor 1"),
                        )),
                    })
                    .collect::<Result<Vec<bool>>>()?;
                Tensor::from_vec(v, shape)
            }
            _ => Err(Error::format("npy", "unsupported dtype")),
        }
    }
}

fn widen<T: Into<i64>>(v: Vec<T>) -> Vec<i64> {
    v.into_iter().map(Into::into).collect()
}

// ----- writing -----

/// The bytes of a version 1.0 `.npy` file (2.0 when the header outgrows 64 KiB) holding `t`
/// in C order and little-endian.
pub fn npy_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let t = t.to_device(Device::Cpu)?;
    let (descr, data) = match t.dtype() {
        DType::F32 => ("<f4", le_bytes(t.to_vec::<f32>()?, f32::to_le_bytes)),
        DType::F64 => ("<f8", le_bytes(t.to_vec::<f64>()?, f64::to_le_bytes)),
        DType::F16 => (
            "<f2",
            le_bytes(t.to_vec::<f16>()?, |x| x.to_bits().to_le_bytes()),
        ),
        DType::I64 => ("<i8", le_bytes(t.to_vec::<i64>()?, i64::to_le_bytes)),
        DType::U32 => ("<u4", le_bytes(t.to_vec::<u32>()?, u32::to_le_bytes)),
        DType::U8 => ("|u1", t.to_vec::<u8>()?),
        DType::Bool => (
            "|b1",
            t.to_vec::<bool>()?.into_iter().map(u8::from).collect(),
        ),
        dtype => {
            return Err(Error::UnsupportedDType {
                op: "npy",
                dtype,
                detail: ": NumPy has no bfloat16; convert to f32 first".into(),
            })
        }
    };
    let shape = match t.shape() {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        dims => format!(
            "({})",
            dims.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // NumPy aligns the data to 64 bytes and ends the header with a newline.
    let padded_with = |prefix: usize| (prefix + header.len() + 1).div_ceil(64) * 64;
    let prefix = if padded_with(10) - 10 <= u16::MAX as usize {
        10
    } else {
        12
    };
    let padded = padded_with(prefix);
    header.push_str(&" ".repeat(padded - prefix - header.len() - 1));
    header.push('\n');
    let mut out = Vec::with_capacity(padded + data.len());
    out.extend_from_slice(MAGIC);
    if prefix == 10 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    Ok(out)
}

pub fn write_npy(path: impl AsRef<Path>, t: &Tensor) -> Result<()> {
    std::fs::write(path.as_ref(), npy_bytes(t)?).map_err(|e| Error::io(path.as_ref(), e))
}

fn le_bytes<T, const N: usize>(v: Vec<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.into_iter().flat_map(f).collect()
}

#[cfg(test)]
mod tests;
