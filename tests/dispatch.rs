//! Arbitrary JSON at every tool, through the framing guard and the MCP service the binary
//! serves with (in-process, real sessions): never a panic, every request answered exactly
//! once with its id and a well-formed answer, and the next request served. The tools and
//! their arguments come from the server's own tools/list.

#[path = "support/loopback.rs"]
mod loopback;

use std::sync::LazyLock;

use proptest::prelude::*;
use serde_json::{Map, Value};

use loopback::{Loopback, call};

static SERVER: LazyLock<Loopback> = LazyLock::new(Loopback::new);

/// Every tool's name and argument names.
static TOOLS: LazyLock<Vec<(String, Vec<String>)>> = LazyLock::new(|| SERVER.tools());

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0u64..3000).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,40}".prop_map(Value::String),
        "[0-9a-f]{32}".prop_map(Value::String),
        prop_oneof![
            Just("cat"),
            Just("sh"),
            Just("group"),
            Just("SIGTERM"),
            Just("enter")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One tools/call: a tool, values for some of its arguments, maybe a key it does not take,
/// now and then `arguments` that is not an object at all, and now and then a key of
/// `params` itself set to anything.
#[derive(Debug, Clone)]
struct Request {
    tool: usize,
    picks: Vec<(usize, Value)>,
    stray: Option<(String, Value)>,
    whole: Option<Value>,
    params: Option<(String, Value)>,
}

fn request() -> impl Strategy<Value = Request> {
    let params_key = prop_oneof![
        Just("_meta".to_owned()),
        Just("name".to_owned()),
        Just("arguments".to_owned()),
        ".{1,8}",
    ];
    (
        any::<usize>(),
        prop::collection::vec((any::<usize>(), json()), 0..6),
        prop::option::of((".{1,8}", json())),
        prop::option::weighted(0.1, json()),
        prop::option::weighted(0.1, (params_key, json())),
    )
        .prop_map(|(tool, picks, stray, whole, params)| Request {
            tool,
            picks,
            stray,
            whole,
            params,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]
    #[test]
    fn every_tool_answers_any_json_exactly_once(
        requests in prop::collection::vec(request(), 1..6),
    ) {
        let tools = &*TOOLS;
        let mut lines = String::new();
        for (n, request) in requests.into_iter().enumerate() {
            let (name, params) = &tools[request.tool % tools.len()];
            let mut arguments = Map::new();
            for (param, value) in request.picks {
                if !params.is_empty() {
                    arguments.insert(params[param % params.len()].clone(), value);
                }
            }
            if let Some((key, value)) = request.stray {
                arguments.insert(key, value);
            }
            let arguments = request.whole.unwrap_or(Value::Object(arguments));
            let mut line: Value = serde_json::from_str(&call(n as u64, name, arguments)).unwrap();
            if let Some((key, value)) = request.params {
                line["params"][key] = value;
            }
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        if let Err(broken) = SERVER.exchange(lines.as_bytes()) {
            return Err(TestCaseError::fail(format!("{broken}\ninput:\n{lines}")));
        }
    }
}

/// Every input a fuzz target once broke the contract with (`fuzz/regressions/`, one file
/// per finding, the bytes written after the handshake) is served correctly now.
#[test]
fn fuzz_findings_stay_fixed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/regressions") {
        let path = entry.expect("an entry").path();
        let input = std::fs::read(&path).expect("a finding");
        // The race the first finding lost was one of several orders: replay a few times.
        for _ in 0..20 {
            if let Err(broken) = SERVER.exchange(&input) {
                panic!("{}: {broken}", path.display());
            }
        }
        replayed += 1;
    }
    assert!(replayed > 0, "no findings in {}", dir.display());
}
