"""The router: validation, tokenization, FCFS admission, instance choice, token streaming, OpenAI HTTP."""
