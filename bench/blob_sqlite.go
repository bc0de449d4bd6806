package main

func blobSQLite() []scenario { return nil }
