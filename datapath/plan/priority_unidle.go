package plan

// PriorityUnidle is table 30's flow that catches the new connections of
// an idled service port (owner "unidle/<port>"): a metered packet-in of
// category PacketInUnidle that carries the port's ServiceID. It sits above
// the services feature's counted drop of the same port
// (PriorityServiceNoEndpoints), so the port is never unguarded while the
// unidling feature takes it over or gives it back, and below the port's
// load-balancing flows (PriorityHigh), which win as soon as it has
// endpoints.
const PriorityUnidle Priority = 195
