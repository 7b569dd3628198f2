//! How a value shows in a notebook: a MIME bundle with `text/plain` (what the REPL prints) and,
//! where a table or preformatted block reads better, `text/html`: a tensor of rank 0-2 as a
//! table (summarized as printing does), an object map (metrics) as a two-column table, an array
//! of maps with the same keys (rows) as a table, a model's tree as a block.

use rhai::{Array, Dynamic, Engine, Map, Scope};
use rusting_brain::Tensor;
use serde_json::{Map as JsonMap, Value};

/// `text/plain` and, where one helps, `text/html`.
pub fn bundle(engine: &Engine, v: &Dynamic) -> JsonMap<String, Value> {
    let text = plain_text(engine, v);
    let html = html(engine, v, &text);
    let mut out = JsonMap::new();
    out.insert("text/plain".into(), text.into());
    if let Some(html) = html {
        out.insert("text/html".into(), html.into());
    }
    out
}

/// How the REPL shows a value: tensors print like PyTorch, registered types (models, datasets)
/// with the `to_string` that `print` uses, strings as they are (so `help("matmul")` reads as
/// text).
pub fn plain_text(engine: &Engine, v: &Dynamic) -> String {
    if let Some(t) = v.read_lock::<Tensor>() {
        return t.to_string();
    }
    if is_registered_type(engine, v) {
        if let Some(text) = registered_text(engine, v) {
            return text;
        }
    }
    v.to_string()
}

/// Whether `v` is one of the types the bindings registered (a model, a dataset).
pub fn is_registered_type(engine: &Engine, v: &Dynamic) -> bool {
    engine.map_type_name(v.type_name()) != v.type_name()
}

/// The text of the `to_string` registered for `v`'s type, as `print` shows it.
pub fn registered_text(engine: &Engine, v: &Dynamic) -> Option<String> {
    of_value(engine, v, "value.to_string()")
}

/// `expr` evaluated with `v` as `value` (a registered type's method or property).
fn of_value<T: Clone + Send + Sync + 'static>(
    engine: &Engine,
    v: &Dynamic,
    expr: &str,
) -> Option<T> {
    let mut scope = Scope::new();
    scope.push("value", v.clone());
    engine.eval_with_scope::<T>(&mut scope, expr).ok()
}

/// The HTML form of `v`, whose plain text is `text`.
fn html(engine: &Engine, v: &Dynamic, text: &str) -> Option<String> {
    if let Some(t) = v.read_lock::<Tensor>() {
        // A scalar reads best as its line of text.
        return (t.rank() > 0).then(|| tensor_html(&t));
    }
    if let Some(map) = v.read_lock::<Map>() {
        return map_html(engine, &map);
    }
    if let Some(rows) = v.read_lock::<Array>() {
        return rows_html(engine, &rows);
    }
    if is_registered_type(engine, v) {
        if engine.map_type_name(v.type_name()) == "Dataset" {
            return dataset_html(engine, v, text);
        }
        return text
            .contains('\n')
            .then(|| format!("<pre>{}</pre>", escape(text)));
    }
    None
}

/// A dataset as its description and its first rows, as pandas' `head()` reads.
fn dataset_html(engine: &Engine, v: &Dynamic, text: &str) -> Option<String> {
    const ROWS: usize = 5;
    let get = |property: &str| of_value::<Dynamic>(engine, v, &format!("value.{property}"));
    let names: Vec<String> = get("feature_names")?
        .into_array()
        .ok()?
        .iter()
        .map(|n| n.to_string())
        .collect();
    let features = get("features")?.try_cast::<Tensor>()?;
    let targets = get("targets")?.try_cast::<Tensor>()?;
    let classes: Vec<String> = get("classes")
        .and_then(|c| c.into_array().ok())
        .map(|a| a.iter().map(|c| c.to_string()).collect())
        .unwrap_or_default();
    let &[rows, cols] = features.shape() else {
        return None;
    };
    if cols != names.len() || targets.shape().first() != Some(&rows) {
        return None;
    }
    let shown = rows.min(ROWS);
    let x = features.narrow(0, 0, shown).ok()?.to_vec_f64().ok()?;
    let y = targets.narrow(0, 0, shown).ok()?.to_vec_f64().ok()?;
    let per_target = y.len() / shown.max(1);
    let mut out = format!(
        "<table><caption style=\"text-align:left\">{}</caption><thead><tr>",
        escape(text)
    );
    for name in &names {
        out.push_str(&format!("<th>{}</th>", escape(name)));
    }
    out.push_str("<th>target</th></tr></thead><tbody>");
    for r in 0..shown {
        out.push_str("<tr>");
        for value in &x[r * cols..(r + 1) * cols] {
            out.push_str(&format!("<td>{}</td>", (value * 1e4).round() / 1e4));
        }
        let target = &y[r * per_target..(r + 1) * per_target];
        let label = match target {
            [t] if t.fract() == 0.0 && (*t as usize) < classes.len() => {
                classes[*t as usize].clone()
            }
            [t] => t.to_string(),
            many => format!("{many:?}"),
        };
        out.push_str(&format!("<td>{}</td></tr>", escape(&label)));
    }
    if rows > shown {
        let more = format!("… {} more rows", rows - shown);
        out.push_str(&format!(
            "<tr><td colspan=\"{}\">{more}</td></tr>",
            cols + 1
        ));
    }
    out.push_str("</tbody></table>");
    Some(out)
}

fn tensor_html(t: &Tensor) -> String {
    let mut caption = format!("Tensor {:?} {} {}", t.shape(), t.dtype(), t.device());
    if t.requires_grad() {
        caption.push_str(" requires_grad");
    }
    let grid = match t.grid() {
        Ok(Some(grid)) => grid,
        // Rank 3 and up, or values that cannot be read: the printed form.
        _ => return format!("<pre>{}</pre>", escape(&t.to_string())),
    };
    let mut out = format!(
        "<table><caption style=\"text-align:left\">{}</caption>",
        escape(&caption)
    );
    for row in &grid {
        out.push_str("<tr>");
        match row {
            Some(cells) => {
                for cell in cells {
                    out.push_str(&format!(
                        "<td style=\"text-align:right\">{}</td>",
                        cell.as_deref().map_or("⋯".into(), escape)
                    ));
                }
            }
            None => {
                let width = grid.iter().flatten().map(Vec::len).max().unwrap_or(1);
                out.push_str(&"<td style=\"text-align:center\">⋮</td>".repeat(width));
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

/// A cell's text: numbers short, nested values as the REPL shows them.
fn cell_text(engine: &Engine, v: &Dynamic) -> String {
    if let Ok(f) = v.as_float() {
        return format!("{}", (f * 1e6).round() / 1e6);
    }
    plain_text(engine, v)
}

fn map_html(engine: &Engine, map: &Map) -> Option<String> {
    if map.is_empty() {
        return None;
    }
    let mut out = String::from("<table>");
    for (key, value) in map {
        out.push_str(&format!(
            "<tr><th style=\"text-align:left\">{}</th><td style=\"text-align:left\"><pre style=\"margin:0\">{}</pre></td></tr>",
            escape(key),
            escape(&cell_text(engine, value))
        ));
    }
    out.push_str("</table>");
    Some(out)
}

/// An array of object maps that share their keys (the rows of a metrics table).
fn rows_html(engine: &Engine, rows: &Array) -> Option<String> {
    let first = rows.first()?.read_lock::<Map>()?.clone();
    let columns: Vec<&str> = first.keys().map(|k| k.as_str()).collect();
    let mut body = String::new();
    for row in rows {
        let map = row.read_lock::<Map>()?;
        if map.len() != columns.len() || columns.iter().any(|c| !map.contains_key(*c)) {
            return None;
        }
        body.push_str("<tr>");
        for c in &columns {
            body.push_str(&format!(
                "<td>{}</td>",
                escape(&cell_text(engine, &map[*c]))
            ));
        }
        body.push_str("</tr>");
    }
    let head: String = columns
        .iter()
        .map(|c| format!("<th>{}</th>", escape(c)))
        .collect();
    Some(format!(
        "<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    ))
}

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_of(src: &str) -> (Engine, Dynamic) {
        let engine = rusting_brain_rhai::new_engine();
        let v = engine.eval::<Dynamic>(src).unwrap();
        (engine, v)
    }

    #[test]
    fn a_matrix_is_a_table_with_its_shape_and_dtype_in_the_caption() {
        let (engine, v) = value_of("tensor([[1.5, 2.0], [3.0, -4.0]])");
        let b = bundle(&engine, &v);
        let html = b["text/html"].as_str().unwrap();
        assert!(html.contains("<caption"), "{html}");
        assert!(html.contains("Tensor [2, 2] f32 cpu"), "{html}");
        assert_eq!(html.matches("<tr>").count(), 2, "{html}");
        assert!(html.contains(">-4.0000<"), "{html}");
        assert!(b["text/plain"]
            .as_str()
            .unwrap()
            .starts_with("tensor([[ 1.5000"));
    }

    #[test]
    fn a_big_matrix_elides_its_middle_rows_and_columns() {
        let (engine, v) = value_of("arange(0.0, 2000.0).reshape([40, 50])");
        let html = bundle(&engine, &v)["text/html"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(html.matches("<tr>").count(), 7, "{html}");
        assert!(html.contains('⋮') && html.contains('⋯'), "{html}");
    }

    #[test]
    fn metrics_maps_and_rows_of_maps_are_tables_and_text_is_escaped() {
        let (engine, v) = value_of("#{ loss: 0.1234567891, name: \"<b>\" }");
        let html = bundle(&engine, &v)["text/html"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            html.contains("<th style=\"text-align:left\">loss</th>"),
            "{html}"
        );
        assert!(html.contains("0.123457"), "{html}");
        assert!(
            html.contains("&lt;b&gt;") && !html.contains("<b>"),
            "{html}"
        );
        let (engine, v) = value_of("[#{ epoch: 1, acc: 0.5 }, #{ epoch: 2, acc: 0.75 }]");
        let html = bundle(&engine, &v)["text/html"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(html.contains("<th>acc</th><th>epoch</th>"), "{html}");
        assert_eq!(html.matches("<tr>").count(), 3, "{html}");
        // Rows with different keys are not a table.
        let (engine, v) = value_of("[#{ a: 1 }, #{ b: 2 }]");
        assert!(!bundle(&engine, &v).contains_key("text/html"));
    }

    #[test]
    fn a_dataset_shows_its_first_rows_with_column_names_and_class_names() {
        let (engine, v) = value_of("data::spirals(10, #{ seed: 1 })");
        let html = bundle(&engine, &v)["text/html"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            html.contains("<th>x0</th><th>x1</th><th>target</th>"),
            "{html}"
        );
        assert_eq!(html.matches("<tr>").count(), 1 + 5 + 1, "{html}");
        assert!(html.contains("more rows"), "{html}");
    }

    #[test]
    fn a_model_shows_its_tree_as_a_block_and_plain_values_have_only_text() {
        let (engine, v) = value_of("nn::sequential([nn::linear(2, 3), nn::flatten()])");
        let b = bundle(&engine, &v);
        assert!(b["text/html"].as_str().unwrap().starts_with("<pre>"));
        let (engine, v) = value_of("42");
        let b = bundle(&engine, &v);
        assert_eq!(b["text/plain"], "42");
        assert!(!b.contains_key("text/html"));
    }
}
