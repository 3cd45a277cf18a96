"""Preflight's check of a host's inputs (fleet_input_problems), one module per concern."""
