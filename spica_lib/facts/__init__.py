"""What aiconfigurator knows, independent of any config: parallel layouts, systems and models, KV capacity."""
