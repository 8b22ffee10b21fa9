"""Real processes, Chromium, real agents, network namespaces."""
