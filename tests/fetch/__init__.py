"""Table tests for the small parts of the fetch engine, one module per module of bake/fetch/."""
