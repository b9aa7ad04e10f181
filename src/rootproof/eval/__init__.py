"""Evaluation: snapshot scenarios, retrieval (knowledge base and public IR collections), live faults."""
