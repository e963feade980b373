"""Model families: what one family of models adds to the contract (its spec, its framework-neutral
weight layout, its NumPy references, its cost model).

benchbase's own families are its subpackages, one each: conformer (AlgoPerf's LibriSpeech
Conformer, with CTC), ds2 (Deep Speech 2, trained with CTC) and rnnt (an RNN transducer, MLPerf
Training's speech architecture); a plugin may bring more. The harness, the data, decoding, the checker
and the conformance kit know no family: what they need of one goes through
``benchbase.families.parts``, the seam that each family's ``parts`` module fills (CONTRIBUTING.md,
"Add a model family").
"""
