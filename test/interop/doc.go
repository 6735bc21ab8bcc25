// Package interop tests bifrost end to end: the broker runs in-process on random ports and
// independent clients drive it over TCP and WebSocket, in MQTT 3.1.1 and 5.0. The clients
// are Eclipse Paho (paho.golang for 5.0, paho.mqtt.golang for 3.1.1) and, where a test
// needs to say exactly what goes on the wire, a raw client that writes and reads packets
// with bifrost's own codec over a plain socket.
//
// The package holds tests only; this file exists to document it.
package interop
