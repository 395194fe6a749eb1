"""The prompting app's part of the operator dashboard: the built context tab."""
