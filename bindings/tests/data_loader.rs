//! `ds.loader(...)` from scripts: batches made as the loop asks, epochs, drop_last, the image
//! loader, Ctrl-C, and the dataset getters.

use rhai::Dynamic;

fn eval(src: &str) -> Result<Dynamic, String> {
    rusting_brain_rhai::new_engine()
        .eval::<Dynamic>(src)
        .map_err(|e| e.to_string())
}

fn text(src: &str) -> String {
    eval(src)
        .unwrap_or_else(|e| panic!("{src}: {e}"))
        .to_string()
}

#[test]
fn a_loop_over_a_loader_sees_every_row_once_in_batches_of_x_and_y() {
    let r = text(
        "let ds = data::spirals(25, #{ seed: 1 });
         let sizes = []; let rows = 0;
         for batch in ds.loader(#{ batch_size: 16 }) {
             sizes.push(batch.x.shape); rows += batch.y.shape[0];
         }
         [sizes, rows, ds.loader(#{ batch_size: 16 }).len()]",
    );
    assert_eq!(r, "[[[16, 2], [16, 2], [16, 2], [2, 2]], 50, 4]");
}

#[test]
fn drop_last_leaves_out_the_short_batch() {
    let r = text(
        "let n = 0; for b in data::spirals(25, #{}).loader(#{ batch_size: 16, drop_last: true }) { n += 1; } n",
    );
    assert_eq!(r, "3");
}

#[test]
fn iterating_a_loader_again_draws_the_next_epoch_and_a_seed_repeats_it() {
    let r = text(
        "fn first_rows(loader) { let out = []; for b in loader { out.push(b.y.tolist()); break; } out[0] }
         let ds = data::spirals(50, #{ seed: 1 });
         let a = ds.loader(#{ batch_size: 8, shuffle: true, seed: 4 });
         let b = ds.loader(#{ batch_size: 8, shuffle: true, seed: 4 });
         let a1 = first_rows(a); let a2 = first_rows(a);
         [a1 == first_rows(b), a2 == first_rows(b), a1 == a2]",
    );
    assert_eq!(r, "[true, true, false]");
}

#[test]
fn batches_keeps_its_array_of_pairs() {
    let r = text(
        "let b = data::spirals(25, #{}).batches(#{ batch_size: 16, drop_last: true }); [b.len(), b[0][0].shape, b[0][1].shape]",
    );
    assert_eq!(r, "[3, [16, 2], [16]]");
}

#[test]
fn datasets_name_their_features_and_classes() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("iris.csv");
    std::fs::write(
        &csv,
        "sepal,petal,species\n5.1,1.4,setosa\n7.0,4.7,versicolor\n6.3,6.0,virginica\n",
    )
    .unwrap();
    let r = text(&format!(
        "let ds = data::csv(\"{}\", \"species\"); [ds.num_features, ds.num_classes, ds.classes, ds.feature_names, ds.to_string()]",
        csv.display()
    ));
    assert_eq!(
        r,
        "[2, 3, [\"setosa\", \"versicolor\", \"virginica\"], [\"sepal\", \"petal\"], \
         \"Dataset(3 rows, 2 features [sepal, petal], 3 classes [setosa, versicolor, virginica], features f32, targets i64)\"]"
    );
}

#[test]
fn an_image_loader_gives_images_in_0_1_and_box_rows() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display();
    let r = text(&format!(
        "let path = data::yolo_shapes(\"{root}/shapes\", #{{ train: 5, val: 1, imgsz: 64, seed: 2 }});
         let ds = data::yolo_images(path, \"train\");
         let out = [];
         for b in ds.loader(#{{ batch_size: 2, imgsz: 64, shuffle: true, seed: 1 }}) {{
             out.push([b.x.shape, b.x.max().item() <= 1.0, b.y.shape[1], b.paths.len()]);
         }}
         [ds.len(), ds.num_classes, out.len(), out[0], out[2]]",
    ));
    assert_eq!(
        r,
        "[5, 6, 3, [[2, 3, 64, 64], true, 6, 2], [[1, 3, 64, 64], true, 6, 1]]"
    );
}

#[test]
fn model_eval_switches_to_evaluation_mode_as_in_pytorch() {
    let r = text(
        "let m = nn::sequential([nn::linear(2, 2), nn::dropout(0.5)]);
         let a = m.training; m.eval(); let b = m.training; m.train(); [a, b, m.training]",
    );
    assert_eq!(r, "[true, false, true]");
}

/// A class folder of copies of the colour-jitter fixture image, two classes.
fn jitter_folder(dir: &std::path::Path) -> String {
    let image = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/color_jitter/input.png");
    for class in ["a", "b"] {
        std::fs::create_dir_all(dir.join(class)).unwrap();
        for i in 0..2 {
            std::fs::copy(&image, dir.join(class).join(format!("{i}.png"))).unwrap();
        }
    }
    dir.display().to_string()
}

#[test]
fn color_jitter_changes_only_the_colours_of_the_same_crops() {
    let dir = tempfile::tempdir().unwrap();
    let root = jitter_folder(dir.path());
    let r = text(&format!(
        "fn first(jitter) {{
             let ds = data::image_folder(\"{root}\", #{{ imgsz: 16, batch_size: 4, seed: 3, flip: 0.0, color_jitter: jitter }});
             for b in ds.train {{ return b.x; }}
         }}
         let plain = first(0);
         [(first([0.4, 0.4, 0.4, 0.1]) - plain).abs().max().item() > 0.01,
          (first(0.0) - plain).abs().max().item(), plain.shape]",
    ));
    assert_eq!(r, "[true, 0.0, [4, 3, 16, 16]]");
}

#[test]
fn bad_augmentation_options_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let root = jitter_folder(dir.path());
    for (option, needle) in [
        (
            "color_jitter: [0.1, 0.2]",
            "color_jitter: expected a number or [brightness",
        ),
        (
            "color_jitter: [0.1, 0.2, 0.3, 0.7]",
            "hue must be in [0, 0.5]",
        ),
        (
            "color_jitter: -0.2",
            "brightness must be a non-negative number",
        ),
        ("flip: 1.5", "flip is a probability"),
        ("min_scale: 0.0", "min_scale must be in (0, 1]"),
        (
            "augment: false, flip: 0.0",
            "flip shapes the training augmentation",
        ),
    ] {
        let err = eval(&format!(
            "data::image_folder(\"{root}\", #{{ imgsz: 16, {option} }})"
        ))
        .unwrap_err();
        assert!(err.contains(needle), "{option}: {err}");
    }
}
