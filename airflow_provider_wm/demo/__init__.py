"""The README's main job: generate example data and run the example DAG over several hours."""
