// Package sqlengine holds what the SQL engines (engine/postgres,
// engine/sqlite) share and neither should copy: the error policy's common
// part (the engine-name prefix, the sentinels an engine decides itself, no
// rows, a database never migrated), conditional writes explained from the
// stored state, the record-tenant id cache and the rules for migration
// files. Mechanics that differ by database stay in the engines.
package sqlengine
