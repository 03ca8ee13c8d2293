/* A stand-in for the driver's NVML (libnvidia-ml.so.1), for machines without a GPU.
 *
 * It answers the calls flashhub makes from what the environment says, read again at
 * every nvmlInit_v2:
 *   STAND_IN_NVML_GPUS        "UUID,DOMAIN,BUS,DEVICE,MAJOR.MINOR;..." (PCI fields in hex)
 *   STAND_IN_NVML_MIGS        "MIG-UUID=INDEX;...": MIG instances and their GPU's index
 *   STAND_IN_NVML_INIT_ERROR  an NVML error code nvmlInit_v2 returns
 *   STAND_IN_NVML_LOG         a file each call appends its name to
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 16
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_NO_PERMISSION 4
#define MIG_HANDLE 0x1000

typedef struct {
    char uuid[96];
    unsigned domain, bus, device;
    int major, minor;
} gpu_t;

typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_info_t;

static gpu_t gpus[MAX_GPUS];
static int gpu_count;

static void note(const char *call) {
    const char *path = getenv("STAND_IN_NVML_LOG");
    FILE *log = path ? fopen(path, "a") : NULL;
    if (log) {
        fprintf(log, "%s\n", call);
        fclose(log);
    }
}

static void read_gpus(void) {
    char spec[4096] = "";
    const char *value = getenv("STAND_IN_NVML_GPUS");
    if (value) strncpy(spec, value, sizeof spec - 1);
    gpu_count = 0;
    for (char *item = strtok(spec, ";"); item && gpu_count < MAX_GPUS; item = strtok(NULL, ";")) {
        gpu_t *gpu = &gpus[gpu_count];
        if (sscanf(item, "%95[^,],%x,%x,%x,%d.%d", gpu->uuid, &gpu->domain, &gpu->bus,
                   &gpu->device, &gpu->major, &gpu->minor) == 6)
            gpu_count++;
    }
}

static gpu_t *gpu_of(void *handle) {
    uintptr_t index = (uintptr_t)handle % MIG_HANDLE;
    return index >= 1 && index <= (uintptr_t)gpu_count ? &gpus[index - 1] : NULL;
}

int nvmlInit_v2(void) {
    note("nvmlInit_v2");
    const char *error = getenv("STAND_IN_NVML_INIT_ERROR");
    if (error) return atoi(error);
    read_gpus();
    return 0;
}

int nvmlShutdown(void) {
    note("nvmlShutdown");
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned *count) {
    *count = (unsigned)gpu_count;
    return 0;
}

/* STAND_IN_NVML_DENY: the indexes, comma-separated, of the GPUs this process may not open
   (a container's device cgroup): NVML_ERROR_NO_PERMISSION. */
static int denied(unsigned index) {
    char spec[256] = "";
    const char *value = getenv("STAND_IN_NVML_DENY");
    if (value) strncpy(spec, value, sizeof spec - 1);
    for (char *item = strtok(spec, ","); item; item = strtok(NULL, ","))
        if ((unsigned)atoi(item) == index) return 1;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    if (index >= (unsigned)gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    if (denied(index)) return NVML_ERROR_NO_PERMISSION;
    *handle = (void *)(uintptr_t)(index + 1);
    return 0;
}

int nvmlDeviceGetHandleByUUID(const char *uuid, void **handle) {
    char spec[4096] = "";
    const char *value = getenv("STAND_IN_NVML_MIGS");
    if (value) strncpy(spec, value, sizeof spec - 1);
    for (char *item = strtok(spec, ";"); item; item = strtok(NULL, ";")) {
        char *equals = strchr(item, '=');
        if (equals && (size_t)(equals - item) == strlen(uuid) && !strncmp(item, uuid, strlen(uuid))) {
            *handle = (void *)(uintptr_t)(MIG_HANDLE + atoi(equals + 1) + 1);
            return 0;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *mig, void **parent) {
    if ((uintptr_t)mig < MIG_HANDLE) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = (void *)((uintptr_t)mig - MIG_HANDLE);
    return gpu_of(*parent) ? 0 : NVML_ERROR_NOT_FOUND;
}

int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned length) {
    gpu_t *gpu = gpu_of(handle);
    if (!gpu || length < sizeof gpu->uuid) return NVML_ERROR_INVALID_ARGUMENT;
    strcpy(uuid, gpu->uuid);
    return 0;
}

int nvmlDeviceGetPciInfo_v3(void *handle, pci_info_t *pci) {
    gpu_t *gpu = gpu_of(handle);
    if (!gpu) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->domain = gpu->domain;
    pci->bus = gpu->bus;
    pci->device = gpu->device;
    snprintf(pci->bus_id, sizeof pci->bus_id, "%08X:%02X:%02X.0", gpu->domain, gpu->bus,
             gpu->device);
    return 0;
}

int nvmlDeviceGetCudaComputeCapability(void *handle, int *major, int *minor) {
    note("nvmlDeviceGetCudaComputeCapability");
    gpu_t *gpu = gpu_of(handle);
    if (!gpu) return NVML_ERROR_INVALID_ARGUMENT;
    *major = gpu->major;
    *minor = gpu->minor;
    return 0;
}
