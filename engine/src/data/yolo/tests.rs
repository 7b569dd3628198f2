//! Tests of the dataset YAML and of ultralytics' image and label rules, one case each.

use super::config::DataConfig;
use super::labels::{image_files, label_path, YoloBox, YoloDataset};
use std::path::{Path, PathBuf};

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn write_image(path: &Path, w: u32, h: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    image::RgbImage::from_pixel(w, h, image::Rgb([90, 120, 30]))
        .save(path)
        .unwrap();
}

// ----- data.yaml -----

fn parse(text: &str, dir: &Path) -> crate::Result<DataConfig> {
    DataConfig::parse(text, &dir.join("data.yaml"))
}

#[test]
fn names_as_list() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse("train: a\nval: b\nnames: [cat, dog, 3, true]\n", dir.path()).unwrap();
    assert_eq!(c.names, ["cat", "dog", "3", "True"]);
}

#[test]
fn names_as_map_with_int_or_string_keys() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse(
        "train: a\nval: b\nnames:\n  1: dog\n  '0': cat\n",
        dir.path(),
    )
    .unwrap();
    assert_eq!(c.names, ["cat", "dog"]);
}

#[test]
fn names_map_with_a_gap_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse("train: a\nval: b\nnames: {0: cat, 2: dog}\n", dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("class indices 0-1"), "{err}");
}

#[test]
fn missing_val_key_names_the_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse("train: a\nnames: [x]\n", dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("'val'") && err.contains("data.yaml"), "{err}");
}

#[test]
fn validation_key_stands_in_for_val() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse("train: a\nvalidation: images/v\nnames: [x]\n", dir.path()).unwrap();
    assert!(c.val[0].ends_with("images/v"));
}

#[test]
fn missing_names_and_nc_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = parse("train: a\nval: b\n", dir.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'names'") && err.contains("data.yaml"),
        "{err}"
    );
}

#[test]
fn nc_alone_gives_class_names_and_must_agree_with_names() {
    let dir = tempfile::tempdir().unwrap();
    let c = parse("train: a\nval: b\nnc: 2.0\n", dir.path()).unwrap();
    assert_eq!(c.names, ["class_0", "class_1"]);
    let err = parse("train: a\nval: b\nnc: 3\nnames: [a, b]\n", dir.path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("must match"), "{err}");
    assert!(parse("train: a\nval: b\nnc: 1.5\n", dir.path()).is_err());
}

#[test]
fn splits_resolve_against_path_or_the_yaml_folder() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    // no `path`: the YAML's folder; a list of splits
    let c = parse(
        "train: [images/t1, images/t2]\nval: images/v\nnames: [x]\n",
        &root,
    )
    .unwrap();
    assert_eq!(c.root, root);
    assert_eq!(c.train, [root.join("images/t1"), root.join("images/t2")]);
    // a relative `path` that does not exist from the current directory: the YAML's folder
    let c = parse(
        "path: ds_nowhere_xyz\ntrain: a\nval: b\nnames: [x]\n",
        &root,
    )
    .unwrap();
    assert_eq!(c.val, [root.join("ds_nowhere_xyz/b")]);
    // `../x` that does not exist is retried as `x`
    std::fs::create_dir_all(root.join("ds/images/val")).unwrap();
    let c = parse(
        "path: ds\ntrain: a\nval: ../images/val\nnames: [x]\n",
        &root,
    )
    .unwrap();
    assert_eq!(c.val, [root.join("ds/images/val")]);
    assert!(c.test.is_empty());
    assert!(c.split("test").is_err());
}

// ----- image lists and label paths -----

#[test]
fn label_path_replaces_the_last_images_folder_and_extension() {
    let p = label_path(Path::new("/d/images/x/images/a.b.JPG"));
    assert_eq!(p, PathBuf::from("/d/images/x/labels/a.b.txt"));
    assert_eq!(
        label_path(Path::new("/d/imgs/a.png")),
        PathBuf::from("/d/imgs/a.txt")
    );
}

#[test]
fn folders_are_searched_recursively_for_image_suffixes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for f in [
        "b.jpg",
        "sub/a.PNG",
        "notes.txt",
        ".hidden.jpg",
        "sub/c.webp",
        "noext",
    ] {
        write(&d.join(f), "");
    }
    let files = image_files(&[d.to_path_buf()]).unwrap();
    assert_eq!(
        files,
        [d.join("b.jpg"), d.join("sub/a.PNG"), d.join("sub/c.webp")]
    );
}

#[test]
fn txt_lists_resolve_dot_slash_against_their_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        &d.join("list.txt"),
        "\u{feff}./images/b.jpg\n./images/a.jpg\n/abs/c.png\n\n",
    );
    let files = image_files(&[d.join("list.txt")]).unwrap();
    let sep = std::path::MAIN_SEPARATOR;
    let base = format!("{}{sep}", d.display());
    assert_eq!(
        files,
        [
            PathBuf::from("/abs/c.png"),
            format!("{base}images/a.jpg").into(),
            format!("{base}images/b.jpg").into()
        ]
    );
}

#[test]
fn no_images_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(image_files(&[dir.path().to_path_buf()]).is_err());
    assert!(image_files(&[dir.path().join("absent")]).is_err());
}

// ----- label rules (verify_image_label) -----

/// A one-image dataset with `label` as its label file (None: no file), 3 classes.
fn one(label: Option<&str>) -> YoloDataset {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.keep();
    write_image(&d.join("images/val/a.jpg"), 32, 24);
    if let Some(text) = label {
        write(&d.join("labels/val/a.txt"), text);
    }
    YoloDataset::from_paths(
        &[d.join("images/val")],
        vec!["a".into(), "b".into(), "c".into()],
    )
    .unwrap()
}

/// A two-image dataset where `a.jpg` gets `label` and `b.jpg` a good label, so dropping `a`
/// leaves a valid dataset.
fn with_bad(label: &str) -> YoloDataset {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.keep();
    write_image(&d.join("images/val/a.jpg"), 32, 24);
    write_image(&d.join("images/val/b.jpg"), 32, 24);
    write(&d.join("labels/val/a.txt"), label);
    write(&d.join("labels/val/b.txt"), "0 0.5 0.5 0.2 0.2\n");
    YoloDataset::from_paths(
        &[d.join("images/val")],
        vec!["a".into(), "b".into(), "c".into()],
    )
    .unwrap()
}

fn assert_dropped(ds: &YoloDataset, reason: &str) {
    assert_eq!(ds.images.len(), 1, "image a should be dropped");
    assert_eq!(ds.images[0].path.file_stem().unwrap(), "b");
    assert_eq!(ds.counts.corrupt, 1);
    let w = ds.warnings.join("\n");
    assert!(w.contains("a.") && w.contains(reason), "warnings: {w}");
}

#[test]
fn good_labels_are_read() {
    let ds = one(Some("1 0.5 0.4 0.2 0.1\n  \n2 0.1 0.1 0.05 0.05"));
    assert_eq!(ds.images[0].size, (32, 24));
    assert_eq!(
        ds.images[0].labels[0],
        YoloBox {
            class: 1,
            xywh: [0.5, 0.4, 0.2, 0.1]
        }
    );
    assert_eq!(ds.images[0].labels.len(), 2);
    assert!(ds.warnings.is_empty());
}

#[test]
fn missing_label_file_is_a_background_image() {
    let ds = one(None);
    assert_eq!(ds.images.len(), 1);
    assert!(ds.images[0].labels.is_empty());
    assert_eq!((ds.counts.missing, ds.counts.found), (1, 0));
    assert_eq!(ds.summary(), "0 images, 1 backgrounds, 0 corrupt");
}

#[test]
fn empty_label_file_is_a_background_image() {
    let ds = one(Some("\n  \n"));
    assert!(ds.images[0].labels.is_empty());
    assert_eq!((ds.counts.found, ds.counts.empty), (1, 1));
}

#[test]
fn duplicate_rows_are_removed_with_a_warning() {
    let ds = one(Some(
        "2 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.1 0.1\n2 0.5 0.5 0.2 0.2\n",
    ));
    let classes: Vec<usize> = ds.images[0].labels.iter().map(|b| b.class).collect();
    assert_eq!(
        classes,
        [0, 2],
        "deduplicated and sorted as np.unique leaves them"
    );
    assert!(
        ds.warnings[0].contains("1 duplicate labels removed"),
        "{:?}",
        ds.warnings
    );
}

#[test]
fn class_out_of_range_drops_the_image() {
    assert_dropped(
        &with_bad("3 0.5 0.5 0.1 0.1\n"),
        "exceeds dataset class count 3",
    );
}

#[test]
fn non_integer_class_drops_the_image() {
    assert_dropped(&with_bad("1.5 0.5 0.5 0.1 0.1\n"), "non-integer class");
}

#[test]
fn coordinate_above_1_01_drops_the_image() {
    assert_dropped(&with_bad("0 1.02 0.5 0.1 0.1\n"), "out of bounds");
    assert_eq!(
        one(Some("0 1.005 0.5 0.1 0.1")).images[0].labels.len(),
        1,
        "1% tolerance"
    );
}

#[test]
fn negative_values_drop_the_image_beyond_the_tolerance() {
    assert_dropped(&with_bad("0 -0.02 0.5 0.1 0.1\n"), "negative label values");
    assert_dropped(&with_bad("0 0.5 0.5 -0.005 0.1\n"), "negative label values");
    // down to -0.01 in a centre is tolerated when no width or height is negative
    assert_eq!(one(Some("0 -0.005 0.5 0.1 0.1")).images[0].labels.len(), 1);
}

#[test]
fn wrong_field_count_drops_the_image() {
    assert_dropped(&with_bad("0 0.5 0.5 0.1\n"), "labels require 5 columns, 4");
    assert_dropped(
        &with_bad("0 0.5 0.5 0.1 0.1 0.9\n"),
        "labels require 5 columns, 6",
    );
}

#[test]
fn non_numeric_field_drops_the_image() {
    assert_dropped(&with_bad("0 0.5 abc 0.1 0.1\n"), "could not convert");
}

#[test]
fn polygon_rows_become_boxes() {
    let ds = one(Some("1 0.1 0.2 0.5 0.2 0.5 0.6 0.1 0.6\n"));
    let b = ds.images[0].labels[0];
    assert_eq!(b.class, 1);
    let want = [0.3, 0.4, 0.4, 0.4];
    assert!(
        b.xywh.iter().zip(want).all(|(a, w)| (a - w).abs() < 1e-6),
        "{:?}",
        b.xywh
    );
    assert_dropped(
        &with_bad("0 0.1 0.2 0.5 0.2 0.5 0.6\n0 0.5 0.5 0.1 0.1\n"),
        "mix segment",
    );
}

#[test]
fn corrupt_image_is_dropped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_image(&d.join("images/b.jpg"), 32, 24);
    write(
        &d.join("images/a.jpg"),
        "\u{ff}\u{d8} definitely not a jpeg",
    );
    let ds = YoloDataset::from_paths(&[d.join("images")], vec!["x".into()]).unwrap();
    assert_dropped(&ds, "corrupt image/label");
}

#[test]
fn images_under_10_pixels_are_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_image(&d.join("images/a.png"), 9, 40);
    write_image(&d.join("images/b.png"), 10, 10);
    let ds = YoloDataset::from_paths(&[d.join("images")], vec!["x".into()]).unwrap();
    assert_dropped(&ds, "<10 pixels");
}

// ----- the synthetic shapes generator -----

fn small_shapes(seed: u64) -> super::ShapesOptions {
    super::ShapesOptions {
        train: 3,
        val: 8,
        imgsz: 96,
        seed,
        ..Default::default()
    }
}

#[test]
fn generated_dataset_reads_back_with_the_same_boxes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_shapes(7);
    let yaml = super::generate_shapes(dir.path(), &opts).unwrap();
    let config = DataConfig::load(&yaml).unwrap();
    assert_eq!(
        config.names,
        ["circle", "square", "triangle", "cross", "diamond", "ring"]
    );
    let ds = YoloDataset::load(&config, "val").unwrap();
    assert_eq!(ds.images.len(), 8);
    assert!(ds.warnings.is_empty(), "{:?}", ds.warnings);
    for (i, entry) in ds.images.iter().enumerate() {
        let (img, boxes) = super::shapes::sample(&opts, 2, i);
        assert_eq!(entry.size, (img.width() as usize, img.height() as usize));
        assert_eq!(entry.size.0.max(entry.size.1), 96);
        assert!((1..=6).contains(&boxes.len()));
        assert_eq!(entry.labels.len(), boxes.len(), "image {i}");
        for (got, (class, xywh)) in entry.labels.iter().zip(&boxes) {
            assert_eq!(got.class, *class);
            for (g, w) in got.xywh.iter().zip(xywh) {
                assert!(
                    (*g as f64 - w).abs() < 1e-6,
                    "image {i}: {:?} vs {xywh:?}",
                    got.xywh
                );
            }
        }
    }
    assert_eq!(YoloDataset::load(&config, "train").unwrap().images.len(), 3);
}

#[test]
fn generated_dataset_is_deterministic_for_a_seed() {
    let (a, b, c) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    super::generate_shapes(a.path(), &small_shapes(3)).unwrap();
    super::generate_shapes(b.path(), &small_shapes(3)).unwrap();
    super::generate_shapes(c.path(), &small_shapes(4)).unwrap();
    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap();
    for f in [
        "images/val/val_00005.jpg",
        "labels/val/val_00005.txt",
        "labels/train/train_00002.txt",
    ] {
        assert_eq!(read(a.path(), f), read(b.path(), f), "{f}");
    }
    assert_ne!(
        read(a.path(), "images/val/val_00005.jpg"),
        read(c.path(), "images/val/val_00005.jpg")
    );
}

// ----- the validation loader -----

fn shapes_val(n: usize, imgsz: usize) -> (tempfile::TempDir, std::sync::Arc<YoloDataset>) {
    let dir = tempfile::tempdir().unwrap();
    let opts = super::ShapesOptions {
        train: 0,
        val: n,
        imgsz,
        seed: 11,
        ..Default::default()
    };
    let yaml = super::generate_shapes(dir.path(), &opts).unwrap();
    let ds = YoloDataset::load(&DataConfig::load(&yaml).unwrap(), "val").unwrap();
    (dir, std::sync::Arc::new(ds))
}

#[test]
fn rect_loader_yields_every_image_once_in_aspect_ratio_order() {
    let (_dir, ds) = shapes_val(11, 64);
    let opts = super::ValLoaderOptions {
        batch_size: 4,
        imgsz: 64,
        workers: 3,
        ..Default::default()
    };
    let loader = super::ValLoader::new(ds.clone(), &opts).unwrap();
    assert_eq!(loader.len(), 3);
    let sizes: Vec<_> = ds.images.iter().map(|e| e.size).collect();
    let order = crate::vision::rect_order(&sizes);
    let sorted: Vec<_> = order.iter().map(|&i| sizes[i]).collect();
    let shapes = crate::vision::rect_batch_shapes(&sorted, 4, 64, 32, 0.5);
    let mut seen = Vec::new();
    for (b, batch) in loader.enumerate() {
        let batch = batch.unwrap();
        let n = batch.indices.len();
        assert_eq!(batch.images.dims(), &[n, 3, shapes[b].0, shapes[b].1]);
        for (k, &i) in batch.indices.iter().enumerate() {
            assert_eq!(batch.labels[k], ds.images[i].labels);
            assert_eq!(batch.orig_hw[k], (ds.images[i].size.1, ds.images[i].size.0));
        }
        seen.extend(batch.indices);
    }
    assert_eq!(seen, order);
}

#[test]
fn square_loader_keeps_file_order_and_matches_preprocess_val() {
    let (_dir, ds) = shapes_val(5, 64);
    let opts = super::ValLoaderOptions {
        batch_size: 2,
        imgsz: 64,
        rect: false,
        workers: 2,
        ..Default::default()
    };
    let batches: Vec<_> = super::ValLoader::new(ds.clone(), &opts)
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    let seen: Vec<usize> = batches.iter().flat_map(|b| b.indices.clone()).collect();
    assert_eq!(seen, [0, 1, 2, 3, 4]);
    let last = &batches[2];
    assert_eq!(last.images.dims(), &[1, 3, 64, 64]);
    let img = crate::vision::image::read_rgb(&ds.images[4].path).unwrap();
    let (want, rp) = crate::vision::preprocess_val(&img, 64, None);
    assert_eq!(last.ratio_pad[0], rp);
    let got = last.images.to_vec::<u8>().unwrap();
    let (x, y) = (40, 33);
    let px = want.get_pixel(x, y).0;
    let plane = 64 * 64;
    let at = (y * 64 + x) as usize;
    assert_eq!(
        [got[at], got[plane + at], got[2 * plane + at]],
        px,
        "NCHW, RGB planes"
    );
}

#[test]
fn loader_reports_an_unreadable_image_by_name_and_stops_cleanly() {
    let (dir, ds) = shapes_val(6, 64);
    std::fs::write(&ds.images[3].path, b"\xFF\xD8 truncated").unwrap();
    let opts = super::ValLoaderOptions {
        batch_size: 2,
        imgsz: 64,
        rect: false,
        workers: 2,
        ..Default::default()
    };
    let results: Vec<_> = super::ValLoader::new(ds.clone(), &opts).unwrap().collect();
    let err = results[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("val_00003.jpg"), "{err}");
    // dropping a loader part-way joins its workers
    let mut loader = super::ValLoader::new(ds, &opts).unwrap();
    assert!(loader.next().unwrap().is_ok());
    drop(loader);
    drop(dir);
}

#[test]
fn a_given_order_is_served_as_is_and_drop_last_leaves_out_the_short_batch() {
    let (_dir, ds) = shapes_val(5, 64);
    let opts = super::ValLoaderOptions {
        batch_size: 2,
        imgsz: 64,
        rect: false,
        workers: 2,
        order: Some(vec![4, 0, 3, 1, 2]),
        drop_last: true,
        ..Default::default()
    };
    let loader = super::ValLoader::new(ds.clone(), &opts).unwrap();
    assert_eq!(loader.len(), 2);
    let seen: Vec<usize> = loader.flat_map(|b| b.unwrap().indices).collect();
    assert_eq!(seen, [4, 0, 3, 1]);
    let bad = super::ValLoaderOptions {
        order: Some(vec![5]),
        ..opts.clone()
    };
    let err = super::ValLoader::new(ds.clone(), &bad)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("image index 5"), "{err}");
    let with_rect = super::ValLoaderOptions { rect: true, ..opts };
    assert!(super::ValLoader::new(ds, &with_rect).is_err());
}

#[test]
fn hwc_to_chw_splits_pixels_into_planes() {
    let img = image::RgbImage::from_fn(3, 2, |x, y| {
        let i = (y * 3 + x) as u8;
        image::Rgb([i, 10 + i, 20 + i])
    });
    let planes = super::loader::hwc_to_chw(&img);
    let want: Vec<u8> = (0..3u8)
        .flat_map(|c| (0..6u8).map(move |i| c * 10 + i))
        .collect();
    assert_eq!(planes, want);
}

/// A split folder holding links to `/`, to `/proc/self` and back to itself, and one to a folder
/// of images elsewhere: the walk follows the last (as Python's glob does), none of the others,
/// ends, and finds the images of both.
#[cfg(unix)]
#[test]
fn links_out_of_the_split_and_back_into_it_are_not_walked() {
    let dir = tempfile::tempdir().unwrap();
    let split = dir.path().join("images/val");
    write_image(&split.join("a.jpg"), 8, 8);
    write_image(&split.join("sub/b.jpg"), 8, 8);
    std::os::unix::fs::symlink("/", split.join("root")).unwrap();
    std::os::unix::fs::symlink("/proc/self", split.join("self")).unwrap();
    std::os::unix::fs::symlink(&split, split.join("sub/loop")).unwrap();
    let shared = dir.path().join("shared");
    write_image(&shared.join("c.jpg"), 8, 8);
    std::os::unix::fs::symlink(&shared, split.join("more")).unwrap();
    let files = image_files(std::slice::from_ref(&split)).unwrap();
    let names: Vec<_> = files
        .iter()
        .map(|f| {
            f.strip_prefix(&split)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, ["a.jpg", "more/c.jpg", "sub/b.jpg"]);
}
