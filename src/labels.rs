//! Class labels: from the model file's metadata when present, else "class N".

pub fn label(labels: &[String], index: usize) -> String {
    labels.get(index).cloned().unwrap_or_else(|| format!("class {index}"))
}
