"""Model families: what one family of models (its weight layout, its NumPy references) adds to the contract.

Today there is one, DS2 (Deep Speech 2). The harness, the data, decoding and the checker know
no family; the backend contract, the conformance kit and the workload spec still name DS2's
parts directly, and a second family turns them into a seam.
"""
