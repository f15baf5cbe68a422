//! ClassBench loaders against the real shared data set and against
//! malformed input. Tests that need /work/shared/data skip with a notice
//! when it is absent.

use std::io::Write;
use std::path::{Path, PathBuf};

use offlow_bench::classbench::{
    self, generate_headers, parse_rules, parse_rules_bytes, parse_trace, Dialect, LoadError,
};
use offlow_bench::classify::{DEFAULT_RULES, DEFAULT_TRACE};
use offlow_classifier::{Classify, LinearClassifier};

/// The shared ClassBench folder `sub`. Absent data skips a test with a
/// notice on a developer's machine, but fails under CI (where `shared/` is
/// always beside the checkout), so a lost data set cannot pass silently.
fn data_dir(sub: &str) -> Option<PathBuf> {
    let d = offlow_bench::shared_data_dir().map(|d| d.join("classbench").join(sub));
    match d {
        Some(d) if d.is_dir() => Some(d),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "shared data set absent under CI"
            );
            eprintln!("NOTICE: shared classbench/{sub} absent, test skipped");
            None
        }
    }
}

fn is_trace(p: &Path) -> bool {
    let n = p.file_name().unwrap().to_str().unwrap();
    n.ends_with("_trace") || n.ends_with("_trace.gz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn oracle(set: &classbench::RuleSet) -> LinearClassifier {
    let mut c = LinearClassifier::new();
    for r in set.to_rules() {
        c.insert(r);
    }
    c
}

#[test]
fn every_shared_rule_set_and_trace_parses() {
    for (sub, dialect) in [
        ("wustl_pclasseval", Dialect::Wustl),
        ("classbench_sets_lyxocs", Dialect::Lyxocs),
    ] {
        let Some(dir) = data_dir(sub) else { continue };
        let mut sets = 0;
        for p in files(&dir) {
            if is_trace(&p) {
                continue;
            }
            let set = classbench::load_rules(&p).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(set.dialect, dialect, "{}", p.display());
            assert!(!set.rules.is_empty(), "{}", p.display());
            assert_eq!(
                set.rules.iter().all(|r| r.flags.is_some()),
                dialect == Dialect::Lyxocs
            );
            sets += 1;
            // Its trace, if any, parses too and refers to existing rules.
            for suffix in ["_trace", "_trace.gz"] {
                let tp = PathBuf::from(format!("{}{suffix}", p.display()));
                if !tp.exists() {
                    continue;
                }
                let t = classbench::load_trace(&tp).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(t.dialect, dialect, "{}", tp.display());
                assert!(!t.headers.is_empty());
                let n = set.rules.len() as u32;
                match dialect {
                    Dialect::Wustl => {
                        assert!(t.expected.unwrap().iter().all(|e| e.is_none_or(|i| i < n)))
                    }
                    Dialect::Lyxocs => assert!(t.generating.unwrap().iter().all(|&i| i < n)),
                }
            }
        }
        assert!(sets >= 9, "{sub}: only {sets} rule sets found");
    }
}

#[test]
fn wustl_rule_counts_match_the_readme() {
    let Some(dir) = data_dir("wustl_pclasseval") else {
        return;
    };
    for (name, n) in [("acl1", 752), ("fw1", 269), ("ipc1", 1550)] {
        let set = classbench::load_rules(&dir.join(name)).unwrap();
        assert_eq!(set.rules.len(), n, "{name}");
    }
}

/// Every acl1_trace line's first match under LinearClassifier equals the
/// trace's rule id (100%), and equals a scan of the file's own semantics.
#[test]
fn acl1_trace_first_match_is_the_trace_rule_id() {
    let set = parse_rules_bytes("acl1", DEFAULT_RULES).unwrap();
    let trace = classbench::parse_trace_bytes("acl1_trace", DEFAULT_TRACE).unwrap();
    assert_eq!(set.rules.len(), 752);
    assert_eq!(trace.headers.len(), 8140);
    let c = oracle(&set);
    let expected = trace.expected.as_ref().unwrap();
    let mut no_match = 0;
    for (h, e) in trace.headers.iter().zip(expected) {
        let got = c.lookup(&h.to_key());
        assert_eq!(got, *e, "{h:?}");
        assert_eq!(got, set.first_match(h), "{h:?}");
        no_match += usize::from(e.is_none());
    }
    assert_eq!(no_match, 11, "acl1_trace has 11 lines with rule id 0");
}

/// The embedded default workload is byte-identical to the shared data set.
#[test]
fn embedded_default_is_the_shared_acl1() {
    let Some(dir) = data_dir("wustl_pclasseval") else {
        return;
    };
    assert_eq!(std::fs::read(dir.join("acl1")).unwrap(), DEFAULT_RULES);
    assert_eq!(
        std::fs::read(dir.join("acl1_trace")).unwrap(),
        DEFAULT_TRACE
    );
}

/// lyxocs traces record the GENERATING rule, which is not always the first
/// match. For fw1_1k the shared README says 7,025 of 7,610 agree; with the
/// flags column ignored (our semantics) we count 6,998, and an independent
/// Python scan of the files gave the same 6,998 (3,703 if flags are honoured),
/// so the README's figure is off, not the loader.
#[test]
fn lyxocs_generating_rule_is_not_always_first_match() {
    let Some(dir) = data_dir("classbench_sets_lyxocs") else {
        return;
    };
    let set = classbench::load_rules(&dir.join("fw1_1k")).unwrap();
    let trace = classbench::load_trace(&dir.join("fw1_1k_trace")).unwrap();
    assert!(trace.expected.is_none());
    let c = oracle(&set);
    let gen = trace.generating.as_ref().unwrap();
    assert_eq!(gen.len(), 7610);
    let mut agree = 0;
    for (h, &g) in trace.headers.iter().zip(gen) {
        // Every header matches the rule it was generated from ...
        assert!(set.rules[g as usize].matches(h), "{h:?} vs rule {g}");
        let first = c.lookup(&h.to_key());
        // ... so it has a first match, at or before that rule.
        assert!(first.is_some_and(|f| f <= g));
        agree += usize::from(first == Some(g));
    }
    assert_eq!(agree, 6998);
}

#[test]
fn gzip_input_parses_like_plain() {
    let text = "@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF\n\
                @0.0.0.0/0 0.0.0.0/0 0 : 65535 0 : 65535 0x00/0x00\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let a = parse_rules_bytes("p", text.as_bytes()).unwrap();
    let b = parse_rules_bytes("p.gz", &gz).unwrap();
    assert_eq!(a.rules, b.rules);
    assert_eq!(a.rules.len(), 2);
    let rules = a.to_rules();
    assert_eq!((rules[0].id, rules[0].priority), (0, 2));
    assert_eq!((rules[1].id, rules[1].priority), (1, 1));
}

fn parse_err(text: &str) -> (usize, String) {
    match parse_rules("bad.rules", text) {
        Err(LoadError::Parse { file, line, reason }) => {
            assert_eq!(file, "bad.rules");
            let shown = LoadError::Parse {
                file: file.clone(),
                line,
                reason: reason.clone(),
            }
            .to_string();
            assert!(shown.starts_with(&format!("bad.rules:{line}: ")), "{shown}");
            (line, reason)
        }
        other => panic!("expected a parse error for {text:?}, got {other:?}"),
    }
}

#[test]
fn malformed_rule_lines_report_file_and_line() {
    let good = "@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF\n";
    let cases: &[(&str, &str)] = &[
        ("1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF", "`@`"),
        (
            "@1.2.3.0/33 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF",
            "0..=32",
        ),
        ("@1.2.3/24 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF", "IPv4"),
        ("@1.2.3.0 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF", "ADDR/LEN"),
        ("@1.2.3.0/24 0.0.0.0/0 0 : 70000 80 : 80 0x06/0xFF", "port"),
        (
            "@1.2.3.0/24 0.0.0.0/0 100 : 5 80 : 80 0x06/0xFF",
            "empty range",
        ),
        (
            "@1.2.3.0/24 0.0.0.0/0 0 - 65535 80 : 80 0x06/0xFF",
            "LO : HI",
        ),
        ("@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 6/255", "hex"),
        (
            "@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 0x106/0xFF",
            "8 bits",
        ),
        ("@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80", "found 8"),
        (
            "@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF 0x00/0x00 x",
            "found 11",
        ),
        (
            "@1.2.3.0/24 0.0.0.0/0 0 : 65535 80 : 80 0x06/0xFF 0x00/0x00",
            "mixed",
        ),
    ];
    for (bad, why) in cases {
        // Blank and comment lines count for the line number.
        let text = format!("{good}\n# comment\n{bad}\n{good}");
        let (line, reason) = parse_err(&text);
        assert_eq!(line, 4, "{bad}");
        assert!(
            reason.contains(why),
            "{bad}: reason {reason:?} lacks {why:?}"
        );
    }
    assert!(matches!(
        parse_rules("empty", "\n# nothing\n"),
        Err(LoadError::Parse { .. })
    ));
    assert!(matches!(
        parse_rules_bytes("junk.gz", &[0x1f, 0x8b, 1, 2, 3]),
        Err(LoadError::Io { .. })
    ));
    assert!(matches!(
        parse_rules_bytes("bin", b"@1.2.3.0/24 \xff\n"),
        Err(LoadError::Parse { line: 1, .. })
    ));
}

#[test]
fn malformed_trace_lines_report_file_and_line() {
    let good = "3231124299 255664495 0 65535 6 566";
    for (bad, why) in [
        ("3231124299 255664495 0 65535 6", "found 5"),
        ("4294967296 255664495 0 65535 6 566", "source address"),
        ("3231124299 255664495 0 65536 6 566", "destination port"),
        ("3231124299 255664495 0 65535 256 566", "protocol"),
        ("3231124299 255664495 0 65535 6 -1", "rule index"),
        ("0 4114795065 0 123 6 33559040 238", "mixed"),
    ] {
        let text = format!("{good}\n{good}\n{bad}\n");
        match parse_trace("t", &text) {
            Err(LoadError::Parse { line, reason, .. }) => {
                assert_eq!(line, 3, "{bad}");
                assert!(reason.contains(why), "{bad}: {reason}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
    let ok = parse_trace("t", &format!("{good}\n1 2 3 4 17 0\n")).unwrap();
    assert_eq!(ok.expected.unwrap(), vec![Some(565), None]);
}

#[test]
fn missing_file_is_an_io_error_naming_it() {
    let e = classbench::load_rules(Path::new("/nonexistent/rules")).unwrap_err();
    assert!(matches!(e, LoadError::Io { .. }));
    assert!(e.to_string().starts_with("/nonexistent/rules: "));
}

#[test]
fn generated_headers_match_their_rules_on_a_real_set() {
    let set = parse_rules_bytes("acl1", DEFAULT_RULES).unwrap();
    let hs = generate_headers(&set.rules, 2000, 42);
    assert_eq!(hs.len(), 2000);
    let c = oracle(&set);
    for (i, h) in hs.iter().enumerate() {
        assert!(set.rules[i % set.rules.len()].matches(h));
        let first = c.lookup(&h.to_key());
        assert!(first.is_some_and(|f| f as usize <= i % set.rules.len()));
    }
}
