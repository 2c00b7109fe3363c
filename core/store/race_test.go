//go:build race

package store_test

// raceEnabled: built with -race, where heavy tests run fewer cases.
const raceEnabled = true
