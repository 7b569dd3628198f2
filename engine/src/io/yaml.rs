//! YAML documents from untrusted files (dataset and model definitions, and the definition a
//! weights file carries): aliases are refused before any tree is built. yaml-rust2 expands an
//! alias by copying the anchored node, so a few hundred bytes of nested aliases (the "billion
//! laughs") become gigabytes; none of these formats uses them.

use yaml_rust2::parser::{MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;
use yaml_rust2::{Event, Yaml, YamlLoader};

/// The documents of `text`, or a message: not YAML, or YAML with an alias (`*name`).
pub fn parse_untrusted(text: &str) -> std::result::Result<Vec<Yaml>, String> {
    /// Where the first alias is, if any.
    struct FirstAlias(Option<Marker>);
    impl MarkedEventReceiver for FirstAlias {
        fn on_event(&mut self, ev: Event, mark: Marker) {
            if matches!(ev, Event::Alias(_)) && self.0.is_none() {
                self.0 = Some(mark);
            }
        }
    }
    // The event stream names each alias without expanding it.
    let mut alias = FirstAlias(None);
    Parser::new_from_str(text)
        .load(&mut alias, true)
        .map_err(|e| e.to_string())?;
    if let Some(at) = alias.0 {
        return Err(format!(
            "line {} column {}: a YAML alias (`*name`), which this file may not use (nested \
             aliases can expand a few hundred bytes into gigabytes)",
            at.line(),
            at.col() + 1
        ));
    }
    YamlLoader::load_from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_yaml_parses_and_an_alias_bomb_is_refused_unexpanded() {
        let docs = parse_untrusted("nc: 2\nnames: [a, b]\n").unwrap();
        assert_eq!(docs[0]["nc"].as_i64(), Some(2));
        // Nine levels of ten aliases each: 10^9 leaves if expanded.
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let e = parse_untrusted(&bomb).unwrap_err();
        assert!(
            e.starts_with("line 2 column") && e.contains("YAML alias"),
            "{e}"
        );
        assert!(parse_untrusted("a: [unclosed").is_err());
    }
}
