//! Scenario variables: `${name}` in any string of args, expectations and step fields.
//!
//! A string that is exactly `${name}` becomes the saved JSON value with its type (so a saved
//! cursor stays a number); inside a longer string the value is spliced in as text.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

static VAR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}").expect("valid pattern"));

/// A variable reference inside a variable's name (`${shell${i}}`): group 1 is the outer
/// part so far, group 2 the inner name.
static NESTED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(\$\{[A-Za-z_][A-Za-z0-9_]*)\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
        .expect("valid pattern")
});

#[derive(Debug, Clone, Default)]
pub struct Vars(BTreeMap<String, Value>);

impl Vars {
    pub fn set(&mut self, name: &str, value: Value) {
        self.0.insert(name.to_string(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    pub fn all(&self) -> &BTreeMap<String, Value> {
        &self.0
    }

    /// Substitute in every string of `value` (object keys are left alone).
    pub fn subst(&self, value: &Value) -> Result<Value, String> {
        Ok(match value {
            Value::String(s) => self.subst_string(s)?,
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.subst(v))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), self.subst(v)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }

    /// Substitute in one string, keeping the saved type when the string is a lone variable.
    /// Names built from variables (`${shell${i}}`) are resolved inside out.
    pub fn subst_string(&self, s: &str) -> Result<Value, String> {
        let s = self.resolve_names(s)?;
        let s = s.as_str();
        if let Some(c) = VAR.captures(s)
            && c.get(0).is_some_and(|m| m.as_str() == s)
        {
            return self.lookup(&c[1]).cloned();
        }
        self.subst_text(s).map(Value::String)
    }

    /// Resolve variables used inside variable names, innermost first.
    fn resolve_names(&self, s: &str) -> Result<String, String> {
        let mut s = s.to_owned();
        while let Some(c) = NESTED.captures(&s) {
            let whole = c.get(0).expect("group 0 exists").range();
            let resolved = match self.lookup(&c[2])? {
                Value::String(v) => format!("{}{v}", &c[1]),
                other => format!("{}{other}", &c[1]),
            };
            s.replace_range(whole, &resolved);
        }
        Ok(s)
    }

    /// Substitute in one string, always producing text.
    pub fn subst_text(&self, s: &str) -> Result<String, String> {
        let s = self.resolve_names(s)?;
        let s = s.as_str();
        let mut out = String::with_capacity(s.len());
        let mut last = 0;
        for c in VAR.captures_iter(s) {
            let whole = c.get(0).expect("group 0 exists");
            out.push_str(&s[last..whole.start()]);
            match self.lookup(&c[1])? {
                Value::String(v) => out.push_str(v),
                other => out.push_str(&other.to_string()),
            }
            last = whole.end();
        }
        out.push_str(&s[last..]);
        Ok(out)
    }

    fn lookup(&self, name: &str) -> Result<&Value, String> {
        self.0.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.0.keys().map(String::as_str).collect();
            format!(
                "undefined variable `${{{name}}}` (defined: {})",
                known.join(", ")
            )
        })
    }
}

/// Follow a dot path (`records.0.cursor`, `error.base_cursor`) into a JSON value.
pub fn lookup_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    if path.is_empty() {
        return Some(value);
    }
    path.split('.').try_fold(value, |v, seg| match v {
        Value::Object(map) => map.get(seg),
        Value::Array(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> Vars {
        let mut v = Vars::default();
        v.set("sid", json!("abc"));
        v.set("next", json!(42));
        v.set("pids", json!([1, 2]));
        v
    }

    #[test]
    fn whole_string_keeps_type() {
        let v = vars();
        assert_eq!(v.subst(&json!("${next}")).unwrap(), json!(42));
        assert_eq!(v.subst(&json!("${pids}")).unwrap(), json!([1, 2]));
        assert_eq!(v.subst(&json!("${sid}")).unwrap(), json!("abc"));
    }

    #[test]
    fn names_built_from_variables_resolve_inside_out() {
        let mut v = vars();
        v.set("i", json!(1));
        v.set("shell1", json!("s1"));
        assert_eq!(v.subst(&json!("${shell${i}}")).unwrap(), json!("s1"));
        assert_eq!(v.subst_text("at ${shell${i}}!").unwrap(), "at s1!");
    }

    #[test]
    fn embedded_is_text() {
        let v = vars();
        assert_eq!(
            v.subst(&json!("id ${sid} at ${next}")).unwrap(),
            json!("id abc at 42")
        );
        assert_eq!(v.subst_text("${next}${next}").unwrap(), "4242");
    }

    #[test]
    fn nested_values_and_untouched_keys() {
        let v = vars();
        let got = v
            .subst(
                &json!({"session_id": "${sid}", "cursor": "${next}", "${sid}": [true, "${sid}"]}),
            )
            .unwrap();
        assert_eq!(
            got,
            json!({"session_id": "abc", "cursor": 42, "${sid}": [true, "abc"]})
        );
    }

    #[test]
    fn undefined_is_an_error() {
        let err = vars().subst(&json!({"a": "${nope}"})).unwrap_err();
        assert!(err.contains("${nope}"), "{err}");
        assert!(vars().subst_text("x ${nope}").is_err());
    }

    #[test]
    fn non_variables_are_left_alone() {
        let v = vars();
        assert_eq!(v.subst(&json!("^\\d{3}$")).unwrap(), json!("^\\d{3}$"));
        assert_eq!(v.subst(&json!("$ {sid}")).unwrap(), json!("$ {sid}"));
    }

    #[test]
    fn dot_paths() {
        let doc = json!({"records": [{"cursor": 3}], "error": {"base_cursor": 9}});
        assert_eq!(lookup_path(&doc, "records.0.cursor"), Some(&json!(3)));
        assert_eq!(lookup_path(&doc, "error.base_cursor"), Some(&json!(9)));
        assert_eq!(lookup_path(&doc, "records.1.cursor"), None);
        assert_eq!(lookup_path(&doc, "error.x"), None);
    }
}
