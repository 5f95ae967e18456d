"""Integrations with other libraries; each imports its library only when used
(`chiplet_fa.integrations.transformers` needs `pip install chiplet_fa[transformers]`)."""
