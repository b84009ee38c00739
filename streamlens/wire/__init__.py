"""What travels on the wire: the schema-v1 result and event messages (`schema`), their encodings and
topics on ZeroMQ (`codec`), CurveZMQ keys (`keys`), and the client that receives them (`subscriber`)."""
