"""What operators watch: the fleet sampled for the Overview's plots (sampler.py, plots.py), and
GET /metrics for Prometheus, with who may scrape it (a token or an allowed address) and what it shows."""
