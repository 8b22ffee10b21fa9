"""The phone's web app: its HTML, CSS and ES modules in this folder (no build step), and `serve`, which
serves them (versioned, gzipped, with their ETags and content security policy) and the Needs you list."""
