"""The algorithm, with no Ray and no files: models, returns, losses, the Worker and ParameterServer classes."""
