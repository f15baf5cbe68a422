//! Small output helpers shared by the experiments: an aligned text table and
//! the final one-line JSON object.
//!
//! Invariants: [`print_json_line`] writes exactly one line, so scripts can
//! take the last line of stdout as the result.
//!
//! Thread-safety: plain functions over plain data.

use std::fmt::Write as _;

/// A text table with left-aligned first column and right-aligned others.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headings.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Append a row (missing cells print empty, extra cells are kept).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// Render with two spaces between columns.
    pub fn render(&self) -> String {
        let ncol = self
            .rows
            .iter()
            .map(Vec::len)
            .chain(std::iter::once(self.header.len()))
            .max()
            .unwrap_or(0);
        let mut width = vec![0usize; ncol];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                if i > 0 {
                    line.push_str("  ");
                }
                // Writing to a String cannot fail.
                let _ = if i == 0 {
                    write!(line, "{c:<w$}")
                } else {
                    write!(line, "{c:>w$}")
                };
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Format a rate with 2 decimals (e.g. Mpps).
pub fn fmt_f(v: f64, decimals: usize) -> String {
    format!("{v:.decimals$}")
}

/// Print `value` as one compact JSON line on stdout.
pub fn print_json_line(value: &serde_json::Value) {
    println!("{value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(["alg", "Mpps"]);
        t.row(["scalar", "48.12"]).row(["avx512x16", "6.1"]);
        assert_eq!(
            t.render(),
            "alg         Mpps\nscalar     48.12\navx512x16    6.1\n"
        );
    }
}
