package journal

// Fenced is the Event of a line that records an outcome the store
// refused: the process's send got an answer after its lease lapsed, and
// another process had settled or taken the execution over (DESIGN 8).
// The record keeps the other's state; this line keeps what came back.
const Fenced = "fenced"
