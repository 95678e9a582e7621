//! Lists the nodes of an ONNX Runtime `.ort` (or ONNX) file, graph by graph, with the type and
//! shape of every initializer a node reads: what a new export's weights look like before the
//! loader is taught to read them.
//!
//!     cargo run --release -p dicta-models --example ort_dump -- encoder_model.ort

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: ort_dump <model.ort>");
        std::process::exit(2);
    };
    let model = match dicta_models::ort::OrtModel::read(std::path::Path::new(&path)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ort_dump: {e}");
            std::process::exit(1);
        }
    };
    for (g, graph) in model.graphs.iter().enumerate() {
        for n in &graph.nodes {
            let inputs: Vec<String> = n
                .inputs
                .iter()
                .map(|i| match model.initializer(g, i) {
                    Some(t) => format!("{i}: {:?}{:?}", t.dtype, t.dims),
                    None => i.clone(),
                })
                .collect();
            println!(
                "{g}\t{}\t{}\t{inputs:?}\t-> {:?}",
                n.op_type, n.name, n.outputs
            );
        }
    }
}
