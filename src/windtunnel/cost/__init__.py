"""Static costs: compute roofline with efficiency curves, collectives on a tiered topology."""
