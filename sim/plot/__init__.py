"""Figures drawn from run tables (matplotlib, Agg backend; no screen needed)."""
