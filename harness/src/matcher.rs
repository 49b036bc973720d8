//! JSON matchers: a plain object matches a subset of keys, arrays match element-wise with equal
//! length, scalars by equality (7 and 7.0 are different JSON numbers), and an object whose keys
//! all start with `$` is a set of operators that must all hold.

use regex::Regex;
use serde_json::Value;

const OPERATORS: [&str; 15] = [
    "$regex",
    "$type",
    "$gt",
    "$ge",
    "$lt",
    "$le",
    "$len",
    "$contains",
    "$one_of",
    "$all",
    "$absent",
    "$any",
    "$not",
    "$each",
    "$count",
];

const TYPES: [&str; 7] = [
    "string", "number", "integer", "boolean", "null", "array", "object",
];

/// Where and why a match failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub path: String,
    pub reason: String,
}

/// Check a matcher's operators when the scenario loads, so a typo is not a silent mismatch.
pub fn validate(m: &Value) -> Result<(), String> {
    match m {
        Value::Array(items) => items.iter().try_for_each(validate),
        Value::Object(map) if is_operator_object(map) => {
            for (op, arg) in map {
                if !OPERATORS.contains(&op.as_str()) {
                    return Err(format!(
                        "unknown matcher operator `{op}` (known: {})",
                        OPERATORS.join(" ")
                    ));
                }
                validate_operator(op, arg)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            if let Some(k) = map.keys().find(|k| k.starts_with('$')) {
                return Err(format!(
                    "`{k}` mixes an operator with plain keys; put operators in their own object"
                ));
            }
            map.values().try_for_each(validate)
        }
        _ => Ok(()),
    }
}

fn validate_operator(op: &str, arg: &Value) -> Result<(), String> {
    match op {
        "$regex" => match arg.as_str() {
            // A pattern with variables is compiled once they are substituted.
            Some(re) if re.contains("${") => Ok(()),
            Some(re) => Regex::new(re)
                .map(|_| ())
                .map_err(|e| format!("$regex: {e}")),
            None => Err("$regex takes a string".into()),
        },
        "$type" => match arg.as_str() {
            Some(t) if TYPES.contains(&t) => Ok(()),
            _ => Err(format!("$type takes one of {}", TYPES.join(" "))),
        },
        "$gt" | "$ge" | "$lt" | "$le" => match arg {
            Value::Number(_) => Ok(()),
            // A variable that will hold a number.
            Value::String(s) if s.starts_with("${") => Ok(()),
            _ => Err(format!("{op} takes a number")),
        },
        "$one_of" | "$all" => match arg {
            Value::Array(items) if !items.is_empty() => items.iter().try_for_each(validate),
            _ => Err(format!("{op} takes a non-empty list of matchers")),
        },
        "$absent" | "$any" => match arg {
            Value::Bool(true) => Ok(()),
            _ => Err(format!("{op} takes `true`")),
        },
        "$count" => match (arg.get("regex").and_then(Value::as_str), arg.get("is")) {
            (Some(re), Some(is)) if arg.as_object().is_some_and(|m| m.len() == 2) => {
                if !re.contains("${") {
                    Regex::new(re).map_err(|e| format!("$count.regex: {e}"))?;
                }
                validate(is)
            }
            _ => Err("$count takes {regex: PATTERN, is: MATCHER}".into()),
        },
        _ => validate(arg),
    }
}

fn is_operator_object(map: &serde_json::Map<String, Value>) -> bool {
    !map.is_empty() && map.keys().all(|k| k.starts_with('$'))
}

/// Match `actual` against `expected`.
pub fn check(expected: &Value, actual: &Value) -> Result<(), Mismatch> {
    check_at(expected, Some(actual), "$")
}

fn fail(path: &str, reason: impl Into<String>) -> Result<(), Mismatch> {
    Err(Mismatch {
        path: path.to_string(),
        reason: reason.into(),
    })
}

/// `actual` is `None` for a key missing from an object.
fn check_at(expected: &Value, actual: Option<&Value>, path: &str) -> Result<(), Mismatch> {
    if let Value::Object(map) = expected
        && is_operator_object(map)
    {
        for (op, arg) in map {
            check_operator(op, arg, actual, path)?;
        }
        return Ok(());
    }
    let Some(actual) = actual else {
        return fail(path, "key is missing");
    };
    match (expected, actual) {
        (Value::Object(exp), Value::Object(act)) => {
            for (key, sub) in exp {
                check_at(sub, act.get(key), &format!("{path}.{key}"))?;
            }
            Ok(())
        }
        (Value::Array(exp), Value::Array(act)) => {
            if exp.len() != act.len() {
                return fail(
                    path,
                    format!("expected {} items, got {}", exp.len(), act.len()),
                );
            }
            for (i, (e, a)) in exp.iter().zip(act).enumerate() {
                check_at(e, Some(a), &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Value::Object(_), _) => fail(path, format!("expected an object, got {}", kind(actual))),
        (Value::Array(_), _) => fail(path, format!("expected an array, got {}", kind(actual))),
        _ if expected == actual => Ok(()),
        _ => fail(path, format!("expected {expected}, got {actual}")),
    }
}

fn check_operator(
    op: &str,
    arg: &Value,
    actual: Option<&Value>,
    path: &str,
) -> Result<(), Mismatch> {
    match (op, actual) {
        ("$absent", None) => return Ok(()),
        ("$absent", Some(a)) => return fail(path, format!("expected no key, got {a}")),
        ("$not", _) => {
            return match check_at(arg, actual, path) {
                Ok(()) => fail(path, format!("expected not to match {arg}")),
                Err(_) => Ok(()),
            };
        }
        ("$one_of", _) => {
            let options = arg.as_array().map(Vec::as_slice).unwrap_or_default();
            let mut reasons = Vec::new();
            for option in options {
                match check_at(option, actual, path) {
                    Ok(()) => return Ok(()),
                    Err(m) => reasons.push(format!("{} ({})", m.reason, m.path)),
                }
            }
            return fail(
                path,
                format!("no $one_of option matched: {}", reasons.join("; ")),
            );
        }
        ("$all", _) => {
            let all = arg.as_array().map(Vec::as_slice).unwrap_or_default();
            return all.iter().try_for_each(|m| check_at(m, actual, path));
        }
        (_, None) => return fail(path, "key is missing"),
        _ => {}
    }
    let actual = actual.expect("missing handled above");
    match op {
        "$any" => Ok(()),
        "$regex" => {
            let pattern = arg.as_str().unwrap_or_default();
            let re = Regex::new(pattern).map_err(|e| Mismatch {
                path: path.into(),
                reason: format!("bad $regex: {e}"),
            })?;
            match actual.as_str() {
                Some(s) if re.is_match(s) => Ok(()),
                Some(s) => fail(path, format!("{s:?} does not match /{pattern}/")),
                None => fail(path, format!("$regex needs a string, got {}", kind(actual))),
            }
        }
        "$type" => {
            let want = arg.as_str().unwrap_or_default();
            if type_matches(want, actual) {
                Ok(())
            } else {
                fail(path, format!("expected type {want}, got {}", kind(actual)))
            }
        }
        "$gt" | "$ge" | "$lt" | "$le" => compare(op, arg, actual, path),
        "$count" => {
            let pattern = arg["regex"].as_str().unwrap_or_default();
            let re = Regex::new(pattern).map_err(|e| Mismatch {
                path: path.into(),
                reason: format!("bad $count.regex: {e}"),
            })?;
            let Some(text) = actual.as_str() else {
                return fail(path, format!("$count needs a string, got {}", kind(actual)));
            };
            let count = re.find_iter(text).count();
            check_at(
                &arg["is"],
                Some(&Value::from(count)),
                &format!("{path}.$count"),
            )
        }
        "$len" => {
            let len = match actual {
                Value::String(s) => s.chars().count(),
                Value::Array(a) => a.len(),
                Value::Object(o) => o.len(),
                _ => {
                    return fail(
                        path,
                        format!("$len needs a string, array or object, got {}", kind(actual)),
                    );
                }
            };
            check_at(arg, Some(&Value::from(len)), &format!("{path}.$len"))
        }
        "$contains" => match (actual, arg) {
            (Value::String(s), Value::String(sub)) => {
                if s.contains(sub.as_str()) {
                    Ok(())
                } else {
                    fail(path, format!("{s:?} does not contain {sub:?}"))
                }
            }
            (Value::String(_), _) => fail(path, "$contains on a string takes a string"),
            (Value::Array(items), _) => {
                if items.iter().any(|i| check_at(arg, Some(i), path).is_ok()) {
                    Ok(())
                } else {
                    fail(path, format!("no element matches {arg}"))
                }
            }
            _ => fail(
                path,
                format!("$contains needs a string or array, got {}", kind(actual)),
            ),
        },
        "$each" => match actual {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| check_at(arg, Some(v), &format!("{path}[{i}]"))),
            Value::Object(map) => map
                .iter()
                .try_for_each(|(k, v)| check_at(arg, Some(v), &format!("{path}.{k}"))),
            _ => fail(
                path,
                format!("$each needs an array or object, got {}", kind(actual)),
            ),
        },
        other => fail(path, format!("unknown operator {other}")),
    }
}

fn type_matches(want: &str, v: &Value) -> bool {
    match want {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

fn compare(op: &str, arg: &Value, actual: &Value, path: &str) -> Result<(), Mismatch> {
    let (Some(a), Some(b)) = (number(actual), number(arg)) else {
        return fail(path, format!("{op} compares numbers: {actual} vs {arg}"));
    };
    let ok = match op {
        "$gt" => a > b,
        "$ge" => a >= b,
        "$lt" => a < b,
        _ => a <= b,
    };
    if ok {
        Ok(())
    } else {
        fail(path, format!("expected {op} {arg}, got {actual}"))
    }
}

/// Integers compare exactly (as i128); anything with a fraction through f64.
enum Num {
    Int(i128),
    Float(f64),
}

fn number(v: &Value) -> Option<Num> {
    if let Some(i) = v.as_i64() {
        return Some(Num::Int(i128::from(i)));
    }
    if let Some(u) = v.as_u64() {
        return Some(Num::Int(i128::from(u)));
    }
    v.as_f64().map(Num::Float)
}

impl PartialEq for Num {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(std::cmp::Ordering::Equal)
    }
}

impl PartialOrd for Num {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a.partial_cmp(b),
            (Num::Int(a), Num::Float(b)) => (*a as f64).partial_cmp(b),
            (Num::Float(a), Num::Int(b)) => a.partial_cmp(&(*b as f64)),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(b),
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A failure explanation: the path, the reason, and a unified diff of expected vs actual.
pub fn explain(expected: &Value, actual: &Value, mismatch: &Mismatch) -> String {
    let exp = serde_json::to_string_pretty(expected).unwrap_or_default() + "\n";
    let act = serde_json::to_string_pretty(actual).unwrap_or_default() + "\n";
    let diff = similar::TextDiff::from_lines(&exp, &act)
        .unified_diff()
        .context_radius(3)
        .header("expected", "actual")
        .to_string();
    format!("at {}: {}\n{diff}", mismatch.path, mismatch.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(m: Value, a: Value) {
        validate(&m).unwrap();
        if let Err(e) = check(&m, &a) {
            panic!("{m} should match {a}: {e:?}");
        }
    }

    fn no(m: Value, a: Value) {
        validate(&m).unwrap();
        assert!(check(&m, &a).is_err(), "{m} should not match {a}");
    }

    #[test]
    fn subset_objects_and_exact_arrays() {
        ok(json!({"a": 1}), json!({"a": 1, "b": 2}));
        no(json!({"a": 1, "c": 3}), json!({"a": 1, "b": 2}));
        ok(json!([1, {"x": true}]), json!([1, {"x": true, "y": 0}]));
        no(json!([1]), json!([1, 2]));
        no(json!({"a": {"b": 1}}), json!({"a": 5}));
    }

    #[test]
    fn scalars_compare_as_json_values() {
        ok(json!(7), json!(7));
        no(json!(7), json!(7.0));
        no(json!("7"), json!(7));
        ok(json!(null), json!(null));
        no(json!(null), json!(false));
    }

    #[test]
    fn regex() {
        ok(json!({"$regex": "^ab+c$"}), json!("abbc"));
        no(json!({"$regex": "^ab+c$"}), json!("ac"));
        no(json!({"$regex": "1"}), json!(1));
    }

    #[test]
    fn types() {
        ok(json!({"$type": "integer"}), json!(3));
        no(json!({"$type": "integer"}), json!(3.5));
        ok(json!({"$type": "number"}), json!(3.5));
        ok(json!({"$type": "string"}), json!("x"));
        no(json!({"$type": "string"}), json!(null));
        ok(json!({"$type": "boolean"}), json!(false));
        ok(json!({"$type": "null"}), json!(null));
        ok(json!({"$type": "array"}), json!([]));
        ok(json!({"$type": "object"}), json!({}));
        no(json!({"$type": "object"}), json!([]));
        assert!(validate(&json!({"$type": "float"})).is_err());
    }

    #[test]
    fn comparisons() {
        ok(json!({"$gt": 0}), json!(1));
        no(json!({"$gt": 1}), json!(1));
        ok(json!({"$ge": 1}), json!(1));
        no(json!({"$ge": 2}), json!(1));
        ok(json!({"$lt": 2}), json!(1.5));
        no(json!({"$lt": 1}), json!(1));
        ok(json!({"$le": 1}), json!(1));
        no(json!({"$le": 0}), json!(1));
        ok(json!({"$gt": 0, "$lt": 10}), json!(5));
        no(json!({"$gt": 0, "$lt": 10}), json!(10));
        ok(
            json!({"$gt": 9007199254740992u64}),
            json!(9007199254740993u64),
        );
        no(json!({"$gt": 0}), json!("1"));
    }

    #[test]
    fn len() {
        ok(json!({"$len": 3}), json!("日本語"));
        ok(json!({"$len": {"$ge": 2}}), json!([1, 2, 3]));
        no(json!({"$len": 0}), json!({"a": 1}));
        ok(json!({"$len": 1}), json!({"a": 1}));
        no(json!({"$len": 1}), json!(5));
    }

    #[test]
    fn contains() {
        ok(json!({"$contains": "ell"}), json!("hello"));
        no(json!({"$contains": "xyz"}), json!("hello"));
        ok(
            json!({"$contains": {"name": "a"}}),
            json!([{"name": "b"}, {"name": "a"}]),
        );
        no(json!({"$contains": {"name": "c"}}), json!([{"name": "b"}]));
    }

    #[test]
    fn one_of_any_not_each() {
        ok(json!({"$one_of": ["a", "b"]}), json!("b"));
        ok(
            json!({"$all": [{"$contains": "a"}, {"$contains": "b"}]}),
            json!("ab"),
        );
        no(
            json!({"$all": [{"$contains": "a"}, {"$contains": "c"}]}),
            json!("ab"),
        );
        no(json!({"$one_of": ["a", "b"]}), json!("c"));
        ok(json!({"$any": true}), json!(null));
        no(json!({"k": {"$any": true}}), json!({}));
        ok(json!({"$not": "a"}), json!("b"));
        no(json!({"$not": "a"}), json!("a"));
        ok(json!({"$each": {"$type": "integer"}}), json!([1, 2]));
        no(json!({"$each": {"$type": "integer"}}), json!([1, "2"]));
        ok(json!({"$each": {"$gt": 0}}), json!({"a": 1, "b": 2}));
        no(json!({"$each": {"$gt": 0}}), json!({"a": 1, "b": 0}));
    }

    #[test]
    fn absent() {
        ok(json!({"k": {"$absent": true}}), json!({"j": 1}));
        no(json!({"k": {"$absent": true}}), json!({"k": null}));
        ok(
            json!({"k": {"$one_of": [{"$absent": true}, false]}}),
            json!({}),
        );
        ok(
            json!({"k": {"$one_of": [{"$absent": true}, false]}}),
            json!({"k": false}),
        );
        no(
            json!({"k": {"$one_of": [{"$absent": true}, false]}}),
            json!({"k": true}),
        );
        ok(json!({"k": {"$not": {"$absent": true}}}), json!({"k": 1}));
    }

    #[test]
    fn validation_rejects_unknown_and_mixed_operators() {
        assert!(validate(&json!({"$eq": 1})).is_err());
        assert!(validate(&json!({"$regex": "x", "plain": 1})).is_err());
        assert!(validate(&json!({"$regex": "("})).is_err());
        assert!(validate(&json!({"a": [{"$absent": false}]})).is_err());
        assert!(validate(&json!({"a": {"$not": {"$bogus": 1}}})).is_err());
    }

    #[test]
    fn mismatch_names_the_path_and_diffs() {
        let m = json!({"records": [{"cursor": 0}, {"cursor": 5}]});
        let a = json!({"records": [{"cursor": 0}, {"cursor": 4}]});
        let err = check(&m, &a).unwrap_err();
        assert_eq!(err.path, "$.records[1].cursor");
        let text = explain(&m, &a, &err);
        assert!(text.contains("-      \"cursor\": 5"), "{text}");
        assert!(text.contains("+      \"cursor\": 4"), "{text}");
    }
}
