// Package spoke holds the trainyard agent that runs next to one execution
// system: it pulls its Dispatches from the hub, runs them through a backend,
// mirrors their status back and publishes the target's capacity.
package spoke
