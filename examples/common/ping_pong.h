/*
 * ping_pong.h: the message of the ping-pong pairs (08, 11, 12): one
 * uint64_t. The client sends a value, the server answers with value + 1;
 * PING_PONG_DONE ends the exchange.
 */
#ifndef EXAMPLES_COMMON_PING_PONG_H_
#define EXAMPLES_COMMON_PING_PONG_H_

#include <stdint.h>

#define PING_PONG_DONE UINT64_MAX
#define PING_PONG_MSG_SIZE sizeof(uint64_t)
/* Offsets in each side's one message region: received, then sent. */
#define PING_PONG_RECV_OFFSET 0
#define PING_PONG_SEND_OFFSET PING_PONG_MSG_SIZE

#endif  // EXAMPLES_COMMON_PING_PONG_H_
