"""retrieve: see DESIGN.md for what this part owns."""
