use super::*;
use crate::DType;
use std::path::PathBuf;

/// A fresh path in the temp dir; the file is removed when the guard drops.
struct TempPath(PathBuf);

impl TempPath {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name = format!("rb-st-{}-{tag}-{n}.safetensors", std::process::id());
        TempPath(std::env::temp_dir().join(name))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A file with a hand-written header, for shapes the writer would never produce.
fn raw_file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn sample(dtype: DType) -> Tensor {
    // Values every dtype holds exactly, booleans included.
    let values: Vec<f64> = (0..6).map(|i| (i % 2) as f64 * (i as f64 + 1.0)).collect();
    Tensor::from_f64s(&values, &[2, 3], dtype).unwrap()
}

fn assert_same(a: &Tensor, b: &Tensor) {
    assert_eq!(a.dtype(), b.dtype());
    assert_eq!(a.shape(), b.shape());
    assert_eq!(a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
}

fn format_message(e: Error) -> String {
    match e {
        Error::Format { format, msg } => {
            assert_eq!(format, "safetensors");
            msg
        }
        other => panic!("expected a safetensors format error, got {other:?}"),
    }
}

#[test]
fn every_dtype_round_trips_through_a_file_including_transposed_views() {
    let mut tensors = BTreeMap::new();
    for dtype in DType::ALL {
        let t = sample(dtype);
        let transposed = t.t().unwrap();
        assert!(!transposed.is_contiguous());
        tensors.insert(format!("{dtype}"), t);
        tensors.insert(format!("{dtype}.t"), transposed);
    }
    let path = TempPath::new("dtypes");
    save(&path.0, &tensors, None).unwrap();
    let back = load(&path.0).unwrap();
    assert_eq!(back.len(), tensors.len());
    for (name, t) in &tensors {
        assert_same(t, &back[name]);
    }
    assert_eq!(back["f32.t"].shape(), &[3, 2]);
}

#[test]
fn a_narrowed_view_saves_only_its_own_elements() {
    let big = Tensor::from_vec((0..12).map(|x| x as f32).collect::<Vec<_>>(), &[4, 3]).unwrap();
    let rows = big.narrow(0, 1, 2).unwrap();
    let bytes = save_bytes(&vec![("rows", rows.clone())], None).unwrap();
    let back = load_bytes(&bytes).unwrap();
    assert_eq!(
        back["rows"].to_vec_f32().unwrap(),
        vec![3., 4., 5., 6., 7., 8.]
    );
}

#[test]
fn metadata_round_trips() {
    let meta: HashMap<String, String> = [("format", "pt"), ("step", "1200")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let path = TempPath::new("meta");
    save(
        &path.0,
        &vec![("w", sample(DType::F32))],
        Some(meta.clone()),
    )
    .unwrap();
    let loaded = load_with_metadata(&path.0).unwrap();
    assert_eq!(loaded.metadata, meta);
    assert_same(&loaded.tensors["w"], &sample(DType::F32));
}

#[test]
fn saving_over_an_existing_file_replaces_it_and_leaves_no_temp_file() {
    let path = TempPath::new("replace");
    save(&path.0, &vec![("a", sample(DType::U8))], None).unwrap();
    // What a save killed mid-write leaves (pid 0 is no user process): the next save removes it.
    let stem = path.0.file_name().unwrap().to_string_lossy().into_owned();
    let killed = path.0.with_file_name(format!(".{stem}.tmp-0-7"));
    std::fs::write(&killed, b"half a file").unwrap();
    save(&path.0, &vec![("b", sample(DType::I64))], None).unwrap();
    assert!(!killed.exists(), "the killed save's temp is still there");
    let back = load(&path.0).unwrap();
    assert_eq!(back.keys().collect::<Vec<_>>(), vec!["b"]);
    let dir = path.0.parent().unwrap();
    let stem = path.0.file_name().unwrap().to_string_lossy().into_owned();
    let leftovers = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!(".{stem}.tmp"))
        })
        .count();
    assert_eq!(leftovers, 0);
}

#[test]
fn a_duplicate_name_on_save_is_an_error() {
    let t = sample(DType::F32);
    let err = save_bytes(&vec![("w", t.clone()), ("w", t)], None).unwrap_err();
    assert!(err.to_string().contains("`w` appears twice"), "{err}");
}

#[test]
fn a_missing_file_gives_an_io_error_naming_the_path() {
    let path = TempPath::new("missing");
    match load(&path.0) {
        Err(Error::Io { path: p, source }) => {
            assert_eq!(p, path.0.display().to_string());
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected an io error, got {:?}", other.map(|m| m.len())),
    }
}

#[test]
fn a_truncated_file_gives_a_format_error_naming_the_path() {
    let path = TempPath::new("truncated");
    save(&path.0, &vec![("w", sample(DType::F64))], None).unwrap();
    let bytes = std::fs::read(&path.0).unwrap();
    std::fs::write(&path.0, &bytes[..bytes.len() - 5]).unwrap();
    let msg = format_message(load(&path.0).unwrap_err());
    assert!(msg.contains(&path.0.display().to_string()), "{msg}");
    assert!(msg.contains("truncated"), "{msg}");
    // Cut inside the header and inside the length, too.
    for cut in [3, 8, 20] {
        assert!(load_bytes(&bytes[..cut]).is_err());
    }
}

#[test]
fn an_unsupported_dtype_is_an_error_naming_the_tensor() {
    let file = raw_file(
        r#"{"scales":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#,
        &[0, 0],
    );
    let msg = format_message(load_bytes(&file).unwrap_err());
    assert!(msg.contains("`scales`") && msg.contains("F8_E4M3"), "{msg}");
}

#[test]
fn offsets_past_the_end_of_the_address_space_give_an_error_not_a_panic() {
    // Eight tensors of 2^61 - 1 bytes (the largest the crate's bit count allows) and one of 7
    // end at usize::MAX; the crate alone adds the header length to that without a check.
    let big = (1usize << 61) - 1;
    let mut entries = Vec::new();
    let mut start = 0usize;
    for i in 0..9 {
        let size = if i == 8 { 7 } else { big };
        entries.push(format!(
            r#""t{i}":{{"dtype":"U8","shape":[{size}],"data_offsets":[{start},{}]}}"#,
            start + size
        ));
        start += size;
    }
    assert_eq!(start, usize::MAX);
    let file = raw_file(&format!("{{{}}}", entries.join(",")), &[]);
    let msg = format_message(load_bytes(&file).unwrap_err());
    assert!(msg.contains("truncated"), "{msg}");
}

#[test]
fn an_empty_tensor_with_dims_whose_strides_overflow_is_an_error() {
    let huge = 1usize << 40;
    let file = raw_file(
        &format!(r#"{{"e":{{"dtype":"F32","shape":[0,{huge},{huge}],"data_offsets":[0,0]}}}}"#),
        &[],
    );
    let msg = format_message(load_bytes(&file).unwrap_err());
    assert!(msg.contains("overflows"), "{msg}");
}

#[test]
fn a_header_length_beyond_the_file_is_an_error() {
    for claimed in [u64::MAX, 1 << 40, 1 << 20] {
        let mut file = raw_file("{}", &[]);
        file[..8].copy_from_slice(&claimed.to_le_bytes());
        assert!(load_bytes(&file).is_err(), "claimed {claimed}");
    }
    assert!(load_bytes(&raw_file("{}", &[])).unwrap().is_empty());
}

/// The file `save` streams through its own temp file is, byte for byte, what the crate's
/// `serialize` lays out (mixed dtypes, metadata, a view).
#[test]
fn a_saved_file_is_the_crates_layout_byte_for_byte() {
    let path = TempPath::new("layout");
    let tensors = vec![
        ("z.u8", sample(DType::U8)),
        ("a.f32", sample(DType::F32)),
        ("m.bf16", sample(DType::BF16).t().unwrap()),
        ("b.i64", sample(DType::I64)),
    ];
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    save(&path.0, &tensors, Some(meta.clone())).unwrap();
    let written = std::fs::read(&path.0).unwrap();
    assert!(written == save_bytes(&tensors, Some(meta)).unwrap());
}

/// Weights are readable by whoever may read the JSON beside them: a saved file gets the mode
/// any new file gets (the umask's), not the 0600 of a private temp file.
#[cfg(unix)]
#[test]
fn a_saved_file_has_the_mode_of_any_new_file() {
    use std::os::unix::fs::PermissionsExt;
    let path = TempPath::new("mode");
    save(&path.0, &vec![("a", sample(DType::F32))], None).unwrap();
    let plain = TempPath::new("plain");
    std::fs::write(&plain.0, b"{}").unwrap();
    let mode = |p: &PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path.0), mode(&plain.0));
}
