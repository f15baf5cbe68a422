//! The `ovs-ofctl add-group` syntax (`man ovs-ofctl`, "Group Syntax"):
//! `group_id=ID,type=TYPE,bucket=BUCKET,bucket=...`, where a bucket is
//! `[weight=W,][watch_port=P,][watch_group=G,]actions=ACTIONS` or, as
//! ovs-ofctl also takes it, a bare action list. Keys take `=` or `:`.
//! Types: `all`, `select`, `indirect`, `ff` / `fast_failover`.
//! Group-level options of later OpenFlow versions (`selection_method`,
//! `bucket_id`, ...) are refused by name.

use super::*;
use crate::message::Bucket;
use crate::{Action, GroupMod};

/// `OFPP_ANY` / `OFPG_ANY`: a bucket that watches nothing.
const ANY: u32 = 0xffff_ffff;

/// Parse one group in `ovs-ofctl add-group` syntax into an `OFPGC_ADD`
/// group-mod (set `command` for a MODIFY).
pub fn parse_group(s: &str) -> Result<GroupMod, SyntaxError> {
    let starts = bucket_starts(s);
    let head = &s[..starts.first().copied().unwrap_or(s.len())];
    let mut group_id = None;
    let mut group_type = None;
    for tok in split_top(head) {
        let (k, v) = key_value(tok);
        let v = v.ok_or_else(|| SyntaxError::new(tok, "needs a value"))?;
        match k {
            "group_id" => group_id = Some(num(tok, v, 32)? as u32),
            "type" => {
                group_type = Some(match v {
                    "all" => 0,
                    "select" => 1,
                    "indirect" => 2,
                    "ff" | "fast_failover" => 3,
                    _ => return Err(SyntaxError::new(tok, "unknown group type")),
                })
            }
            _ => return Err(SyntaxError::new(tok, "unknown group setting")),
        }
    }
    let mut buckets = Vec::new();
    for (i, &at) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(s.len());
        let body = s[at + "bucket=".len()..end].trim_end_matches([',', ' ', '\t']);
        buckets.push(parse_bucket(body)?);
    }
    Ok(GroupMod {
        // OFPGC_ADD.
        command: 0,
        group_type: group_type.ok_or_else(|| SyntaxError::new(s, "no type="))?,
        group_id: group_id.ok_or_else(|| SyntaxError::new(s, "no group_id="))?,
        buckets,
    })
}

/// Parse an `ovs-ofctl add-groups` file: one group per line; blank lines
/// and `#` comments skipped. `file` names the source in errors.
pub fn parse_group_file(text: &str, file: &str) -> Result<Vec<(usize, GroupMod)>, FileError> {
    parse_lines(text, file, parse_group)
}

/// Where each `bucket=` starts (at a token boundary).
fn bucket_starts(s: &str) -> Vec<usize> {
    keyword_starts(s, "bucket=").collect()
}

fn parse_bucket(body: &str) -> Result<Bucket, SyntaxError> {
    let mut b = Bucket {
        weight: 0,
        watch_port: ANY,
        watch_group: ANY,
        actions: Vec::new(),
    };
    let mut rest = body;
    loop {
        let rest_trim = rest.trim_start_matches([',', ' ', '\t']);
        let tok_end = rest_trim.find([',', ' ', '\t']).unwrap_or(rest_trim.len());
        let tok = &rest_trim[..tok_end];
        let (k, v) = key_value(tok);
        match (k, v) {
            ("weight", Some(v)) => b.weight = num(tok, v, 16)? as u16,
            ("watch_port", Some(v)) => b.watch_port = parse_port(tok, v)?,
            ("watch_group", Some(v)) => b.watch_group = num(tok, v, 32)? as u32,
            ("bucket_id", _) => {
                return Err(SyntaxError::new(tok, "bucket_id needs OpenFlow 1.5"));
            }
            ("actions", Some(_)) => {
                b.actions = bucket_actions(&rest_trim["actions=".len()..])?;
                return Ok(b);
            }
            _ => {
                // ovs-ofctl's older form: the rest is the action list.
                b.actions = bucket_actions(rest_trim)?;
                return Ok(b);
            }
        }
        rest = &rest_trim[tok_end..];
    }
}

/// A bucket's action list: plain actions only (no instructions).
fn bucket_actions(s: &str) -> Result<Vec<Action>, SyntaxError> {
    let mut out = Vec::new();
    for ins in parse_actions(s, &Match::ANY)? {
        match ins {
            Instruction::ApplyActions(a) => out.extend(a),
            _ => {
                return Err(SyntaxError::new(
                    s,
                    "a bucket holds actions, not instructions",
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(port: u32) -> Action {
        Action::Output {
            port,
            max_len: 0xffff,
        }
    }

    #[test]
    fn ovs_ofctl_groups() {
        let g = parse_group(
            "group_id=7,type=select,bucket=weight:3,watch_port:2,actions=set_field:10.0.0.3->ip_dst,output:3,bucket=weight=1,actions=output:2",
        )
        .unwrap();
        assert_eq!((g.group_id, g.group_type, g.buckets.len()), (7, 1, 2));
        assert_eq!((g.buckets[0].weight, g.buckets[0].watch_port), (3, 2));
        assert_eq!(g.buckets[0].actions.len(), 2);
        assert_eq!(g.buckets[1].actions, [out(2)]);
        let g = parse_group("group_id=1,type=all,bucket=output:2,bucket=output:3").unwrap();
        assert_eq!(g.buckets.len(), 2);
        assert_eq!(g.buckets[1].actions, [out(3)]);
        assert_eq!(g.buckets[1].watch_port, ANY);
        let g = parse_group("group_id=2,type=ff,bucket=watch_port:1,actions=group:1").unwrap();
        assert_eq!(g.buckets[0].actions, [Action::Group(1)]);
        assert!(parse_group("group_id=2,type=nope,bucket=output:1").is_err());
        assert!(parse_group("type=all,bucket=output:1").is_err(), "no id");
        assert!(parse_group("group_id=1,type=all,bucket=goto_table:1").is_err());
        let e =
            parse_group_file("# c\n\ngroup_id=1,type=all\ngroup_id=x,type=all\n", "g").unwrap_err();
        assert_eq!(e.line, 4);
    }
}
